"""gym-check on the real nemo-gym 0.7.0 wheel: compatible, field table, its own session, agent and model server.

Needs PyPI the first time (the wheel and the runtime of its agent and model-server apps, ~0.65 GB);
the venv is cached under `~/.cache/compactsim/gym` (or `$COMPACTSIM_GYM_CACHE`), so later runs
fetch nothing. The module fixture runs the whole live check once (about 25 s warm on 2 cores).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compactsim.harness.gym_check import GymCheckOptions, run_gym_check
from compactsim.harness.gym_check import baseline as baselines
from compactsim.harness.gym_check.live import compare_payloads
from compactsim.harness.gym_check.probe import CheckerProcess
from compactsim.harness.gym_check.revision import fetch_revision, parse_spec
from compactsim.harness.gym_check.venv import default_cache_dir, ensure_venv

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
    # the only non-info findings: our agents vs Gym's own agent (pinned in test_gym_payloads_differ_...)
    assert [d for d in report.drift if d["severity"] != "info" and not d["path"].startswith("live:live-")] == []
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
        GymCheckOptions(spec=SPEC, live=True, live_scenarios=("reasoning-recency",), emitter=f"{__name__}:_emit_reference_example",
                        agent=False),
        out_dir=tmp_path,
    )
    (scenario,) = report.live["scenarios"]
    assert scenario["emitter"]["summary"] == "2 field(s) differ"
    assert [d["path"] for d in scenario["emitter"]["diffs"]] == ["final_policy_decision", "lineage_deltas"]
    assert [d["severity"] for d in report.drift if d["path"] == "live:reasoning-recency"] == ["warning"]
    assert report.exit_code == 0


def test_gym_check_live_our_emitter_matches_the_revision_field_by_field(live_report) -> None:
    """The default hook (compactsim.agents.evidence.live) emits what the revision's session emits for every live scenario."""
    report, _out = live_report
    assert report.live["emitter_hook"] == "compactsim.agents.evidence.live:emit_live_script"
    emitters = {s["name"]: s["emitter"] for s in report.live["scenarios"]}
    assert emitters == {name: {"summary": "identical", "diffs": []}
                        for name in ("no-compaction", "image-recency-k2", "reasoning-recency")}
    assert [d for d in report.drift if d["path"].startswith("live:") and not d["path"].startswith("live:live-")] == []


#: (calls answered 200, non-200 answers, final answer) per live scenario, two rollouts each.
LIVE_GYM = {
    "live-image-recency-rolling": (8, 0, "The screens differ."),
    "live-image-recency-chunked": (10, 0, "Settings is open."),
    "live-reasoning-stripping": (8, 0, "Settings is open."),
    "live-several-tool-calls": (6, 0, "Settings is open."),
    "live-transient-503": (6, 1, "Settings is open."),
    "live-length-finish": (4, 0, "Settings is op"),
}


def test_gym_agent_and_model_server_run_every_live_scenario_and_the_audit_passes(live_report) -> None:
    """Gym's own agent and model server reach every script's final answer; its results pass the audit."""
    report, out = live_report
    gym = report.live_gym
    assert gym is not None and gym["mode"] == "gym-http"
    assert gym["mocked"] == "resources server only (/seed_session, tool calls, /verify); model answers from `compactsim serve`"
    got = {s["name"]: (s["calls"], s["retried"], set(s["final_answers"].values())) for s in gym["scenarios"]}
    assert got == {name: (calls, retried, {answer}) for name, (calls, retried, answer) in LIVE_GYM.items()}
    for s in gym["scenarios"]:
        assert (s["rollouts"], s["completed"], s["audit"], s["errors"]) == (2, 2, "passed", {}), s["name"]
        assert (out / "live-gym" / f"{s['name']}.json").exists()
    assert report.setup["venv_profile"] == "runtime"


def test_gym_wire_section_names_what_the_revision_sends_and_reads(live_report) -> None:
    report, _out = live_report
    (chat,) = report.live_gym["wire"]["endpoints"]
    assert chat["path"] == "/v1/chat/completions"
    assert chat["statuses"] == {"200": 42, "503": 1}
    assert chat["request_fields"] == ["logprobs", "messages", "metadata", "model", "required_prefix_token_ids",
                                      "return_token_ids", "return_tokens_as_token_ids", "temperature", "top_logprobs"]
    assert chat["missing_required"] == []
    assert all(r["served"] for r in chat["revision_reads"])
    assert chat["metadata_constant_per_rollout"] is True  # Gym forwards the task metadata unchanged
    assert "messages[role=user].content[].type=image_url" in chat["request_message_fields"]


def test_our_agents_emit_what_the_revision_emits_field_for_field(live_report) -> None:
    """Ours vs Gym's own agent on the same script: every field equal, strictly (null ≠ absent, 0 ≠ 0.0).

    Only the ids Gym mints with uuid4 are replayed into our agent; every digest and id built on
    them, the token arrays, usage, the contract and the echoed request fields must come out equal.
    """
    report, _out = live_report
    emitters = {s["name"]: s["emitter"] for s in report.live_gym["scenarios"]}
    assert set(emitters) == set(LIVE_GYM)
    for name, e in emitters.items():
        assert [r["summary"] for r in e["rollouts"]] == ["identical", "identical"], (name, e["rollouts"])
        assert (e["identical"], e["categories"]) == (True, {}), name
    assert [d for d in report.drift if d["path"].startswith("live:live-")] == []
    assert all("unscripted_tool_calls" not in s for s in report.live_gym["scenarios"])
