"""`compactsim replay DIR` on malformed saved runs: one typed line naming the file and field, exit 2.

A saved run directory is input a person hands over (and may have edited). A broken file used to
end in a traceback (exit 1), and a broken setting (a string seed, a backend that does not load)
came back as a finding (exit 1) as if the scenario had failed; both are bad input: exit 2.
Every case is refused before anything runs, so these tests are fast.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from compactsim.harness.cli import app
from compactsim.harness.runner import DEFAULT_BACKEND

pytestmark = [pytest.mark.timeout(120), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

SCENARIO = {"name": "rt-base", "purpose": "replay input hardening", "script": {"generate": {"turns": 2}}}
RUN = {"scenario": "rt-base", "seed": None, "backend": DEFAULT_BACKEND, "device": "cpu", "max_steps": None}


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def saved_run(directory: Path, run: Any = None, scenario: Any = None, audit: Any = None) -> Path:
    """A scenario run directory as `compactsim run` writes it; str values are written verbatim."""
    directory.mkdir(parents=True, exist_ok=True)
    files = {"run.json": RUN if run is None else run, "scenario.json": SCENARIO if scenario is None else scenario,
             "audit.json": audit}
    for name, value in files.items():
        if value is not None:
            (directory / name).write_text(value if isinstance(value, str) else json.dumps(value))
    return directory


def assert_refused(result: Any, *fragments: str) -> None:
    """Exit 2 with one `error:` line holding every fragment, and no traceback."""
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.output.startswith("error: ") and result.output.count("\n") == 1, result.output
    for fragment in fragments:
        assert fragment in result.output, (fragment, result.output)


RUN_CASES: dict[str, tuple[Any, tuple[str, ...]]] = {
    "runjson_bad": ('{"backend": \n', ("run.json:2:1", "not valid JSON")),
    "runjson_deep": ("[" * 5000 + "]" * 5000, ("run.json:1:65", "nested deeper than 64 levels")),
    "runjson_list": ("[1]", ("run.json: expected a JSON object of run settings, got list",)),
    "runjson_seed_str": ({"seed": "abc"}, ("run.json: field seed:", "expected a non-negative int")),
    "runjson_seed_neg": ({"seed": -5}, ("run.json: field seed:", "expected 0 <= seed < 2**63")),
    "runjson_seed_bool": ({"seed": True}, ("run.json: field seed:",)),
    "runjson_backend": ({"backend": "nonexistent_mod:X"}, ("run.json: field backend:", "does not load")),
    "runjson_backend_int": ({"backend": 5}, ("run.json: field backend:", "expected 'module:attr'")),
    "runjson_device": ({"device": "tpu"}, ("run.json: field device:", "'tpu'")),
    "runjson_max_steps": ({"max_steps": 0}, ("run.json: field max_steps:", "expected null or an integer >= 1")),
    "runjson_unknown": ({"sede": 3}, ("run.json: field sede: unknown run setting",)),
    "runjson_precision": ({"precision": "bfloat16"}, ("run.json: field precision:", "expected null or one of float32, float64")),
    "runjson_source": ({"source": 7}, ("run.json: field source:", "expected the scenario file's path")),
}


@pytest.mark.parametrize("case", sorted(RUN_CASES))
def test_malformed_run_json_exits_2_naming_the_field(case: str, tmp_path: Path):
    run, fragments = RUN_CASES[case]
    assert_refused(invoke("replay", str(saved_run(tmp_path / case, run=run))), *fragments)


def test_an_invalid_scenario_json_exits_2_naming_the_field(tmp_path: Path):
    result = invoke("replay", str(saved_run(tmp_path / "s", scenario={"name": 5})))
    assert_refused(result, "scenario.json: field name: not a valid scenario", "more problem(s)")


def test_a_malformed_saved_audit_exits_2_naming_the_finding(tmp_path: Path):
    assert_refused(invoke("replay", str(saved_run(tmp_path / "a", audit={"findings": [1]}))),
                   "audit.json: field findings[0]: not a saved finding")
    assert_refused(invoke("replay", str(saved_run(tmp_path / "b", audit={"findings": {}}))),
                   "audit.json: field findings: expected an object whose findings is a list")
    good = {"scenario": "no-compaction", "step": 0, "check": "row.tokens", "row": None, "position": None,
            "expected": 1, "actual": 2, "message": "m", "reproduce": "compactsim run no-compaction --seed 0"}
    for k, (edit, fragment) in enumerate((
            ({"check": "row.bogus"}, "audit.json: field findings[0]: not a saved finding (ValueError"),
            ({"step": "0"}, "audit.json: field findings[0].step: '0': expected an integer or null"),
            ({"position": 1.5}, "audit.json: field findings[0].position: 1.5: expected an integer or null"),
            ({"message": ["m"]}, "audit.json: field findings[0].message: ['m']: expected a string"))):
        assert_refused(invoke("replay", str(saved_run(tmp_path / f"c{k}", audit={"findings": [{**good, **edit}]}))),
                       fragment)


SUMMARY_CASES: dict[str, tuple[str, tuple[str, ...]]] = {
    "summary_bad": ('{"failed": \n', ("summary.json:2:1", "not valid JSON")),
    "summary_list": ("[]", ("summary.json: field failed: expected an object whose failed is a list",)),
    "summary_failed_int": ('{"failed": [5]}', ("summary.json: field failed[0]: 5 is not a scenario name",)),
    "summary_failed_traversal": ('{"failed": ["../../elsewhere"]}',
                                 ("summary.json: field failed[0]: '../../elsewhere' is not a scenario name",)),
}


@pytest.mark.parametrize("case", sorted(SUMMARY_CASES))
def test_malformed_summary_json_exits_2_naming_the_field(case: str, tmp_path: Path):
    text, fragments = SUMMARY_CASES[case]
    (tmp_path / "summary.json").write_text(text)
    assert_refused(invoke("replay", str(tmp_path)), *fragments)


def test_a_run_saved_on_a_gpu_machine_is_refused_without_one(tmp_path: Path):
    """`run --device cuda` without a GPU exits 2; replaying such a run here must too, not report findings."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the saved device is usable")
    result = invoke("replay", str(saved_run(tmp_path / "gpu", run={**RUN, "device": "cuda"})))
    assert_refused(result, "run.json: field device:")


@pytest.mark.parametrize(("backend", "says"), [
    ("tests.quality.plan_returns_none:Backend", "the backend's plan raised TypeError: plan returned NoneType, not a TracePlan"),
    ("tests.quality.crashing_train_step:Backend", None),  # crashes only in train_step, which a payload replay never runs
    # outside the Exception hierarchy, still the backend's failure: only Ctrl-C or a signal stops a replay
    ("tests.quality.raises_its_own_base_exception:Backend", "the backend's plan raised Cancelled: the scheduler cancelled"),
    ("tests.quality.raises_generator_exit:Backend", "the backend's materialize raised GeneratorExit: the row loader was"),
])
def test_a_payload_replayed_through_a_broken_backend_is_diagnosed_not_a_traceback(backend: str, says: str | None):
    payload = "examples/gym-0.7.0-transport-compacted-3call.json"  # a bare response: the batch has no reward (exit 2)
    result = invoke("replay", payload, "--backend", backend)
    assert "Traceback" not in result.output and result.exit_code == 2, result.output
    if says is None:
        assert result.output == invoke("replay", payload).output  # the reference's diagnosis, word for word
    else:
        assert says in result.output, result.output
