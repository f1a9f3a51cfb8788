"""The scenario runner end to end: exact outcomes, deterministic summaries, failures that keep artifacts, replay."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from compactsim.harness.core.errors import ContractError
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.replay import replay_directory, replay_targets
from compactsim.harness.runner import (
    RunOptions,
    ScenarioRun,
    load_saved_run,
    resolve_scenarios,
    run_scenario,
    run_suite,
    suite_record,
    write_outputs,
)

pytestmark = [pytest.mark.timeout(600), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

BROKEN = "tests.quality.broadcast_first_advantage:Backend"
SMALL = ("explicit-logprobs", "image-compaction-k2-rolling", "legacy-token-merge-drift")


class RefusesEveryPlan(ReferenceBackend):
    """A backend that refuses every rollout (used to prove a backend error becomes the observed outcome)."""

    def plan(self, result: Mapping[str, Any]) -> Any:
        raise ContractError("turn_order", rollout_id="x", turn_id=2, detail="refused on purpose")


def _one(name: str, **options: Any) -> ScenarioRun:
    return run_scenario(resolve_scenarios([name])[0], RunOptions(**options))


@functools.cache
def _small_in_process() -> tuple[ScenarioRun, ...]:
    """`SMALL` at seed 3, run once in this process: the baseline the comparisons below share (the Ray executor's
    is in test_ray_cluster.py, on its own instance and on an existing cluster)."""
    return tuple(run_suite(resolve_scenarios(list(SMALL)), RunOptions(seed=3)))


def _write(runs: Sequence[ScenarioRun], out: Path, options: RunOptions, names: Sequence[str]) -> Path:
    write_outputs(out, runs, suite_record(runs, options, names), total_seconds=1.0, executor="local")
    return out


def test_reference_backend_passes_image_compaction_k2_with_exact_counts():
    rec = _one("image-compaction-k2-rolling").record
    assert (rec.passed, rec.expected, rec.observed) == (True, "success", "success")
    assert (rec.steps, rec.rows, rec.tokens) == (1, 6, 2384)
    assert rec.findings == ()
    assert rec.reproduce == "compactsim run image-compaction-k2-rolling --seed 0"
    assert [v.rollout_id for v in rec.traces] == ["s0-g0-r0", "s0-g0-r1"]
    assert [len(v.rows) for v in rec.traces] == [3, 3]


def test_adversarial_scenario_passes_when_the_backend_refuses_with_the_expected_code():
    rec = _one("legacy-token-merge-drift").record
    assert (rec.passed, rec.expected, rec.observed, rec.steps) == (True, "error:undeclared_discontinuity",
                                                                   "error:undeclared_discontinuity", 0)
    assert rec.error is not None and rec.error.stage == "plan"


def test_backend_error_in_a_success_scenario_is_an_unexpected_error_finding():
    rec = _one("explicit-logprobs", backend="tests.integration.test_runner:RefusesEveryPlan").record
    assert not rec.passed
    assert [(f.check, f.step, f.actual) for f in rec.findings] == [("verdict.unexpected_error", 0, "turn_order")]
    assert rec.observed == "error:turn_order"


def test_unloadable_backend_is_a_harness_error_finding():
    rec = _one("explicit-logprobs", backend="no.such.module:Backend").record
    assert not rec.passed
    assert [f.check for f in rec.findings] == ["run.harness_error"]
    assert "does not load" in rec.findings[0].message


def test_seed_override_changes_the_rows_and_names_the_seed():
    base, other = _one("explicit-logprobs"), _one("explicit-logprobs", seed=9)
    assert other.record.seed == 9 and other.record.passed
    assert other.record.reproduce == "compactsim run explicit-logprobs --seed 9"
    assert base.files["artifacts/step-0000.npz"] != other.files["artifacts/step-0000.npz"]


def test_failed_scenario_still_writes_its_artifacts(tmp_path: Path):
    run = _one("image-compaction-k2-rolling", backend=BROKEN)
    assert not run.record.passed
    out = _write([run], tmp_path / "out", RunOptions(backend=BROKEN), ["image-compaction-k2-rolling"])
    base = out / "scenarios" / "image-compaction-k2-rolling"
    for rel in ("artifacts/step-0000.npz", "artifacts/step-0000.json", "rollouts/step-0000.jsonl", "results/step-0000.jsonl",
                "metrics.jsonl", "scenario.json", "run.json", "audit.json"):
        assert (base / rel).is_file(), rel
    audit = json.loads((base / "audit.json").read_text())
    assert audit["passed"] is False
    assert audit["findings"][0]["check"] == "row.advantage"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["failed"] == ["image-compaction-k2-rolling"]
    assert summary["counts"] == {"failed": 1, "findings": len(run.record.findings), "passed": 0, "scenarios": 1}


@pytest.mark.slow  # two whole runs, one on worker processes (~11 s)
def test_summary_json_is_byte_identical_across_two_runs_in_process_and_on_worker_processes(tmp_path: Path):
    scenarios = resolve_scenarios(list(SMALL))
    options = RunOptions(seed=3)
    done: list[str] = []
    a = _write(_small_in_process(), tmp_path / "a", options, SMALL)
    b = _write(run_suite(scenarios, options, parallel=2, on_event=lambda ev: done.append(ev.scenario) if ev.done else None),
               tmp_path / "b", options, SMALL)
    assert sorted(done) == sorted(SMALL)  # one done event per scenario, in completion order
    assert (a / "summary.json").read_bytes() == (b / "summary.json").read_bytes()
    for rel in ("artifacts/step-0000.npz", "artifacts/step-0000.json", "rollouts/step-0000.jsonl"):
        path = Path("scenarios") / "image-compaction-k2-rolling" / rel
        assert (a / path).read_bytes() == (b / path).read_bytes(), rel
    summary = json.loads((a / "summary.json").read_text())
    assert summary["seed"] == 3
    assert [s["name"] for s in summary["scenarios"]] == [s.name for s in scenarios]
    assert summary["gym"]["flavours"] == ["gym-0.7.0-transport", "none"]
    assert summary["gym"]["producer"] == "compactsim-emitter"
    assert "timings" not in (a / "summary.json").read_text()


def test_real_ports_on_loopback_give_the_same_summary(tmp_path: Path):
    scenarios = resolve_scenarios(["explicit-logprobs"])
    asgi = RunOptions(seed=3)
    http = RunOptions(seed=3, server="http")
    a = _write(run_suite(scenarios, asgi), tmp_path / "a", asgi, ["explicit-logprobs"])
    b = _write(run_suite(scenarios, http), tmp_path / "b", asgi, ["explicit-logprobs"])
    assert (a / "summary.json").read_bytes() == (b / "summary.json").read_bytes()


def test_replay_of_a_saved_failure_reproduces_the_same_findings(tmp_path: Path):
    run = _one("image-compaction-k2-rolling", backend=BROKEN, seed=4)
    out = _write([run], tmp_path / "out", RunOptions(backend=BROKEN, seed=4), ["image-compaction-k2-rolling"])
    assert replay_targets(out) == [out / "scenarios" / "image-compaction-k2-rolling"]
    scenario, options, saved = load_saved_run(out / "scenarios" / "image-compaction-k2-rolling")
    assert (scenario.seed, options.backend) == (4, BROKEN)
    assert saved is not None and saved["passed"] is False
    replayed = replay_directory(out / "scenarios" / "image-compaction-k2-rolling")
    assert replayed.same_findings
    assert [f.to_json() for f in replayed.run.record.findings] == [f.to_json() for f in run.record.findings]


def test_step_cap_shortens_a_multi_step_scenario_and_its_reproduction():
    rec = _one("scripted-three-steps", max_steps=1).record
    assert (rec.passed, rec.steps) == (True, 1)
    assert rec.reproduce == "compactsim run scripted-three-steps --seed 0 --steps 1"
