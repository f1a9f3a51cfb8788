"""gym-check against a local stand-in revision (no network): compatible baseline, each injected drift caught."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from compactsim.harness.cli import app
from compactsim.harness.gym_check import GymCheckOptions, run_gym_check
from compactsim.harness.gym_check.errors import GymSetupError
from compactsim.harness.gym_check.summary import gym_summary_record

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gym_drift" / "baseline"
SESSION = "responses_api_agents/simple_agent_with_compaction/compaction/session.py"
#: The injected drifts, applied to ModelCallMetadata only: (what, old text, new text).
DRIFTS: tuple[tuple[str, str, str], ...] = (
    ("rename", "    generation_evidence_digest: str\n", "    evidence_digest: str\n"),
    ("rename-producer", 'payload["generation_evidence_digest"]', 'payload["evidence_digest"]'),
    ("remove", "    expected_append_compatible: bool\n", ""),
    ("constraint", "    turn_id: int = Field(ge=1)\n", "    turn_id: int = Field(ge=0)\n"),
)


def _drifted_copy(dest: Path) -> Path:
    shutil.copytree(FIXTURE, dest)
    path = dest / SESSION
    text = path.read_text(encoding="utf-8")
    start, end = text.index("class ModelCallMetadata"), text.index("class ContextCompactedResponse")
    segment = text[start:end]
    for what, old, new in DRIFTS:
        assert segment.count(old) == 1, f"fixture drift {what!r} no longer applies"
        segment = segment.replace(old, new)
    path.write_text(text[:start] + segment + text[end:], encoding="utf-8")
    return dest


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One venv cache for the module: source checkouts share a venv keyed by their deps."""
    return tmp_path_factory.mktemp("gym-cache")


@pytest.fixture(scope="module")
def drifted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _drifted_copy(tmp_path_factory.mktemp("rev") / "drifted")


def _by_path(report, kind: str) -> dict[str, dict]:
    return {d["path"]: d for d in report.drift if d["kind"] == kind}


def test_gym_check_baseline_fixture_is_compatible(cache_dir: Path) -> None:
    report = run_gym_check(GymCheckOptions(spec=str(FIXTURE), offline=True, cache_dir=cache_dir))
    assert (report.verdict, report.exit_code, report.blocking) == ("compatible", 0, [])
    assert report.revision["flavours"] == ["gym-0.7.0-full", "gym-0.7.0-transport"]
    assert report.revision["import_mode"] == "no-server-utils"
    assert report.setup["deps_source"] == "host"
    assert [p["revision"] for p in report.payloads] == ["valid", "n/a: the revision has no gym-pr2870 envelope"]
    assert all(d["status"] == "ok" for d in report.digests)
    fields = {(m["model"], f["name"]): f for m in report.models for f in m["fields"]}
    assert fields[("ModelCallMetadata", "turn_id")]["constraints"] == "ge=1"
    assert fields[("ModelCallMetadata", "turn_id")]["type"] == "int ≥1"
    assert fields[("TransportContextCompactionContract", "schema_version")]["type"] == "Literal[3]"


def test_gym_check_reports_renamed_field_as_blocking(cache_dir: Path, drifted: Path) -> None:
    report = run_gym_check(GymCheckOptions(spec=str(drifted), offline=True, cache_dir=cache_dir))
    renamed = _by_path(report, "renamed")["model_call_metadata[].generation_evidence_digest"]
    assert renamed["severity"] == "blocking"
    assert renamed["detail"].startswith("'generation_evidence_digest' → 'evidence_digest' (same type and position)")
    assert renamed["planner_verdict"].startswith("rejected: malformed_payload")


def test_gym_check_reports_removed_field_as_blocking(cache_dir: Path, drifted: Path) -> None:
    report = run_gym_check(GymCheckOptions(spec=str(drifted), offline=True, cache_dir=cache_dir))
    removed = _by_path(report, "removed")["model_call_metadata[].expected_append_compatible"]
    assert removed["severity"] == "blocking"
    assert removed["detail"] == "the revision no longer has 'expected_append_compatible'; the planner requires it"
    assert "expected_append_compatible: Field required" in removed["planner_verdict"]


def test_gym_check_reports_loosened_constraint_as_blocking(cache_dir: Path, drifted: Path) -> None:
    report = run_gym_check(GymCheckOptions(spec=str(drifted), offline=True, cache_dir=cache_dir))
    # the planner also bounds turn_id above (int32); that bound is unchanged since the baseline, so it is info only
    [changed] = [d for d in report.drift if d["kind"] == "constraint_changed"
                 and d["path"] == "model_call_metadata[].turn_id" and d["severity"] != "info"]
    assert changed["severity"] == "blocking"
    assert changed["detail"] == "the revision allows ≥0; the planner requires ≥1"
    assert changed["transform"] == {"op": "set", "path": ["model_call_metadata", "[0]"], "key": "turn_id", "value": 0}
    assert changed["planner_verdict"].startswith("rejected: malformed_payload")


def test_gym_check_drift_exits_3_and_names_each_drift(cache_dir: Path, drifted: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["gym-check", "--gym", str(drifted), "--offline", "--cache-dir", str(cache_dir), "--out", str(tmp_path)]
    )
    assert result.exit_code == 3, result.output
    saved = json.loads((tmp_path / "gym-check.json").read_text(encoding="utf-8"))
    assert saved["verdict"] == "drift"
    named = {line.split(" [", 1)[0] for line in saved["blocking"]}
    assert {
        "renamed model_call_metadata[].generation_evidence_digest",
        "removed model_call_metadata[].expected_append_compatible",
        "constraint_changed model_call_metadata[].turn_id",
    } <= named
    assert "drift the planner cannot accept" in result.output


def test_gym_check_setup_failure_exits_2_with_reason(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["gym-check", "--gym", "not a spec", "--out", str(tmp_path)])
    assert result.exit_code == 2
    saved = json.loads((tmp_path / "gym-check.json").read_text(encoding="utf-8"))
    assert saved["verdict"] == "setup_failed"
    assert saved["reason"] == (
        "gym setup failed at spec: 'not a spec' is neither an existing path nor a pin; "
        "give nemo-gym==X.Y.Z, a .whl file or a source directory"
    )


def test_gym_check_offline_without_cached_wheel_fails_at_download(tmp_path: Path) -> None:
    report = run_gym_check(GymCheckOptions(spec="nemo-gym==0.0.1", offline=True, cache_dir=tmp_path))
    assert (report.verdict, report.exit_code) == ("setup_failed", 2)
    assert report.reason is not None and report.reason.startswith("gym setup failed at download: nemo-gym==0.0.1 is not in the cache")


def _bare_revision(root: Path) -> Path:
    (root / "nemo_gym").mkdir(parents=True)
    (root / "nemo_gym" / "__init__.py").write_text("", encoding="utf-8")
    (root / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "0"\ndependencies = ["pydantic"]\n', encoding="utf-8")
    return root


def test_gym_check_revision_without_the_compaction_agent_is_contract_absent(cache_dir: Path, tmp_path: Path) -> None:
    empty = _bare_revision(tmp_path / "empty-rev")
    report = run_gym_check(GymCheckOptions(spec=str(empty), offline=True, cache_dir=cache_dir))
    assert (report.verdict, report.exit_code) == ("contract_absent", 3)
    assert report.reason is not None and report.reason.startswith(
        "contract absent: nemo-gym 0 has no responses_api_agents.simple_agent_with_compaction (ModuleNotFoundError")


def test_gym_check_revision_with_a_broken_compaction_agent_fails_at_import(cache_dir: Path, tmp_path: Path) -> None:
    broken = _bare_revision(tmp_path / "broken-rev")
    agent = broken / "responses_api_agents" / "simple_agent_with_compaction"
    agent.mkdir(parents=True)
    for pkg in (agent.parent, agent):
        (pkg / "__init__.py").write_text("", encoding="utf-8")
    report = run_gym_check(GymCheckOptions(spec=str(broken), offline=True, cache_dir=cache_dir))
    assert (report.verdict, report.exit_code) == ("setup_failed", 2)
    assert report.reason is not None and report.reason.startswith("gym setup failed at import: no evidence envelope found")
    assert "simple_agent_with_compaction.compaction" in report.reason


def test_gym_setup_error_names_its_step() -> None:
    err = GymSetupError("venv", "python -m venv exited 1")
    assert (err.step, str(err)) == ("venv", "gym setup failed at venv: python -m venv exited 1")


def test_gym_summary_record_names_revision_and_flavour(cache_dir: Path, tmp_path: Path) -> None:
    report = run_gym_check(GymCheckOptions(spec=str(FIXTURE), offline=True, cache_dir=cache_dir))
    record = gym_summary_record(report, flavour="gym-0.7.0-transport")
    assert record["contract_flavour"] == "gym-0.7.0-transport"
    assert record["revision"]["version"] == "0.7.0+fixture"
    assert record["revision"]["digest"].startswith("sha256:")
    assert record["verdict"] == "compatible"
    assert gym_summary_record(None, flavour="gym-pr2870") == {
        "producer": "compactsim-emitter", "contract_flavour": "gym-pr2870", "revision": None, "verdict": None,
    }


def test_gym_check_live_needs_the_revisions_own_session(cache_dir: Path) -> None:
    report = run_gym_check(GymCheckOptions(spec=str(FIXTURE), offline=True, cache_dir=cache_dir, live=True, agent=False))
    assert (report.verdict, report.exit_code) == ("setup_failed", 2)
    assert report.reason == (
        "gym setup failed at checker: live failed inside the revision: "
        "RuntimeError: the revision has no ContextCompactionSession"
    )


def test_gym_check_live_agent_offline_needs_a_cached_runtime(cache_dir: Path) -> None:
    """The agent run needs the revision's full runtime; offline without it cached is a setup failure (exit 2)."""
    report = run_gym_check(GymCheckOptions(spec=str(FIXTURE), offline=True, cache_dir=cache_dir, live=True))
    assert (report.verdict, report.exit_code) == ("setup_failed", 2)
    assert report.reason == (
        "gym setup failed at install: --offline: the revision's runtime venv (agent and model-server apps) is not "
        "cached; run the live check once with the index reachable"
    )


def _pr2870_copy(dest: Path) -> Path:
    """The fixture in the Gym PR #2870 shape: `rollout_trace_contract`, no schema_version/mode."""
    shutil.copytree(FIXTURE, dest)
    path = dest / SESSION
    text = path.read_text(encoding="utf-8")
    for old, new in (
        ('    schema_version: Literal[2] = 2\n    mode: Literal["exact_trace_authority"] = "exact_trace_authority"\n', ""),
        ('    schema_version: Literal[3] = 3\n    mode: Literal["exact_trace_authority"] = "exact_trace_authority"\n', ""),
        ("context_compaction_contract: ContextCompactionContract", "rollout_trace_contract: ContextCompactionContract"),
        ("context_compaction_contract: TransportContextCompactionContract", "rollout_trace_contract: TransportContextCompactionContract"),
    ):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path.write_text(text, encoding="utf-8")
    return dest


def test_gym_check_recognises_the_pr2870_shape_as_compatible(cache_dir: Path, tmp_path: Path) -> None:
    report = run_gym_check(GymCheckOptions(spec=str(_pr2870_copy(tmp_path / "pr2870")), offline=True, cache_dir=cache_dir))
    assert (report.verdict, report.exit_code) == ("compatible", 0), report.blocking
    assert report.revision["flavours"] == ["gym-pr2870", "gym-pr2870-full"]
    assert [p["revision"] for p in report.payloads] == ["n/a: the revision has no gym-0.7.0-transport envelope", "valid"]
    warnings = {(d["path"], d["envelope"]) for d in report.drift if d["severity"] == "warning"}
    assert ("rollout_trace_contract.schema_version", "ContextCompactedTransportResponse") in warnings
    assert ("rollout_trace_contract.mode", "ContextCompactedTransportResponse") in warnings
