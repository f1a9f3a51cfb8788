"""gym-check on the real nemo-gym 0.7.0 wheel: compatible, field table, and its own session in the loop.

Needs PyPI the first time (the wheel, pydantic and openai); the venv is cached under
`.gym-cache/` in the checkout (or `$COMPACTSIM_GYM_CACHE`), so later runs are offline and fast.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.gym_check import GymCheckOptions, run_gym_check
from harness.gym_check import baseline as baselines
from harness.gym_check.live import compare_payloads
from harness.gym_check.probe import CheckerProcess
from harness.gym_check.revision import fetch_revision, parse_spec
from harness.gym_check.venv import default_cache_dir, ensure_venv

pytestmark = [pytest.mark.gym, pytest.mark.slow]
SPEC = "nemo-gym==0.7.0"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gym-0.7.0-transport-compacted-3call.json"


@pytest.fixture(scope="module")
def live_report(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("gym-check")
    return run_gym_check(GymCheckOptions(spec=SPEC, live=True), out_dir=out), out


def test_gym_check_nemo_gym_0_7_0_is_compatible(live_report) -> None:
    report, _out = live_report
    assert (report.verdict, report.exit_code, report.blocking) == ("compatible", 0, []), report.reason
    assert report.revision["version"] == "0.7.0"
    assert report.revision["flavours"] == ["gym-0.7.0-full", "gym-0.7.0-transport"]
    assert report.revision["import_mode"] in ("shim", "native")
    assert report.revision["distributions"]["openai"] == "2.44.0"
    assert [d for d in report.drift if d["severity"] != "info"] == []
    assert [d for d in report.digests if d["status"] != "ok"] == []
    assert report.payloads[0]["revision"] == "valid"


def test_gym_check_field_table_lists_the_0_7_0_evidence_models(live_report) -> None:
    report, _out = live_report
    models = {m["model"]: m for m in report.models}
    assert {"ContextCompactedTransportResponse", "ContextCompactedResponse", "ModelCallMetadata", "ObservedCompletion",
            "TransportContextCompactionContract", "GenerationContract", "RewriteBoundaryEvent"} <= set(models)
    meta = models["ModelCallMetadata"]
    assert (meta["kind"], meta["extra"], meta["frozen"]) == ("BaseModel", "forbid", True)
    assert [f["name"] for f in meta["fields"]][-3:] == ["eligible", "evidence_source", "generation_evidence_digest"]
    assert len(meta["fields"]) == 21
    fields = {f["name"]: f for f in meta["fields"]}
    assert (fields["turn_id"]["type"], fields["turn_id"]["constraints"]) == ("int ≥1", "ge=1")
    assert models["RewriteBoundaryEvent"]["kind"] == "dataclass"


def test_gym_check_live_payloads_plan_and_materialize(live_report) -> None:
    report, out = live_report
    live = {s["name"]: s for s in report.live["scenarios"]}
    assert set(live) == {"no-compaction", "image-recency-k2", "reasoning-recency"}
    assert live["no-compaction"]["plan"] == "accepted: single, traces [1,2,3]"
    assert live["image-recency-k2"]["plan"] == "accepted: physical, traces [1,2,3 | 4 | 5]"
    assert live["reasoning-recency"]["plan"] == "accepted: physical, traces [1,2 | 3]"
    assert [c["turn_id"] for c in live["image-recency-k2"]["calls"] if c["boundary_event_id"]] == [4, 5]
    for scenario in live.values():
        assert scenario["expectation_mismatches"] == []
        assert scenario["rows"].startswith("ok: ")
        assert scenario["digests"] == []
        assert (out / "live" / f"{scenario['name']}.json").exists()


def test_gym_check_live_reproduces_the_reference_example(live_report) -> None:
    """The revision's own session, run on the §8 script, emits the shared example exactly."""
    _report, out = live_report
    real = json.loads((out / "live" / "reasoning-recency.json").read_text(encoding="utf-8"))["response"]
    expected = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    diffs = [d for d in compare_payloads(expected, real) if not d.path.startswith(("lineage_deltas", "final_policy_decision"))]
    assert diffs == []


def test_committed_baseline_matches_nemo_gym_0_7_0() -> None:
    """The schemas drift is measured against must be the real 0.7.0 ones."""
    cache = default_cache_dir()
    revision = fetch_revision(parse_spec(SPEC), cache / "downloads")
    venv = ensure_venv(revision, cache)
    with CheckerProcess(venv.python) as checker:
        inspected = checker.request("inspect")
    fresh = baselines.pack("nemo-gym 0.7.0", revision.digest, inspected["envelopes"])
    assert fresh == baselines.load()


def _emit_reference_example(script) -> dict:
    """A stand-in emitter hook: our payload for the §8 script is the shared example."""
    return json.loads(EXAMPLE.read_text(encoding="utf-8"))


def test_gym_check_live_compares_our_emitter_field_by_field(tmp_path: Path) -> None:
    report = run_gym_check(
        GymCheckOptions(spec=SPEC, live=True, live_scenarios=("reasoning-recency",), emitter=f"{__name__}:_emit_reference_example"),
        out_dir=tmp_path,
    )
    (scenario,) = report.live["scenarios"]
    assert scenario["emitter"]["summary"] == "2 field(s) differ"
    assert [d["path"] for d in scenario["emitter"]["diffs"]] == ["final_policy_decision", "lineage_deltas"]
    assert [d["severity"] for d in report.drift if d["path"] == "live:reasoning-recency"] == ["warning"]
    assert report.exit_code == 0


def test_gym_check_live_our_emitter_matches_the_revision_field_by_field(live_report) -> None:
    """The default hook (agents.gym_live) emits what the revision's session emits for every live scenario."""
    report, _out = live_report
    assert report.live["emitter_hook"] == "agents.gym_live:emit_live_script"
    emitters = {s["name"]: s["emitter"] for s in report.live["scenarios"]}
    assert emitters == {name: {"summary": "identical", "diffs": []}
                        for name in ("no-compaction", "image-recency-k2", "reasoning-recency")}
    assert [d for d in report.drift if d["path"].startswith("live:")] == []
