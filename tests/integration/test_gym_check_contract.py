"""A NeMo-Gym revision without the compaction contract is drift ("contract absent", exit 3), not a setup failure."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from compactsim.harness.cli import app
from compactsim.harness.gym_check import GymCheckOptions, run_gym_check
from compactsim.harness.gym_check.revision import fetch_revision, parse_spec
from compactsim.harness.gym_check.run import contract_absent

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gym_no_compaction"
DRIFT_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gym_drift" / "baseline"
MODULE = "responses_api_agents.simple_agent_with_compaction"


def _wheel(tmp_path: Path, version: str, files: list[str]) -> Path:
    path = tmp_path / f"nemo_gym-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name in files:
            zf.writestr(name, "")
        zf.writestr(f"nemo_gym-{version}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: nemo-gym\nVersion: {version}\n")
    return path


def test_source_tree_without_the_compaction_agent_is_contract_absent(tmp_path: Path) -> None:
    report = run_gym_check(GymCheckOptions(spec=str(FIXTURE), offline=True, live=True), out_dir=tmp_path)
    assert (report.verdict, report.exit_code) == ("contract_absent", 3)
    assert report.reason == (f"contract absent: nemo-gym 0.5.0 has no {MODULE} (ModuleNotFoundError: No module named "
                             f"'{MODULE}'): no compaction agent, no context_compaction_contract, nothing the planner's "
                             "contract path can read")
    assert report.blocking == [report.reason.replace("contract absent: ", "contract_absent: ", 1)]
    assert report.setup.get("venv_key") is None  # decided from the files: nothing was built


def test_cli_exits_3_and_names_contract_absent(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["gym-check", "--gym", str(FIXTURE), "--offline", "--out", str(tmp_path), "--json"])
    assert result.exit_code == 3, result.output
    data = json.loads((tmp_path / "gym-check.json").read_text(encoding="utf-8"))
    assert (data["verdict"], data["exit_code"]) == ("contract_absent", 3)
    assert data["reason"].startswith("contract absent: nemo-gym 0.5.0 has no ")


def test_wheels_are_classified_from_their_file_list(tmp_path: Path) -> None:
    old = fetch_revision(parse_spec(str(_wheel(tmp_path, "0.5.0", ["nemo_gym/__init__.py",
                                                                    "responses_api_agents/simple_agent/app.py"]))), tmp_path)
    new = fetch_revision(parse_spec(str(_wheel(tmp_path, "0.7.0", [
        "nemo_gym/__init__.py", "responses_api_agents/simple_agent_with_compaction/compaction/session.py"]))), tmp_path)
    other = fetch_revision(parse_spec(str(_wheel(tmp_path, "1.0.0", ["something_else/__init__.py"]))), tmp_path)
    assert contract_absent(old) is not None and "nemo-gym 0.5.0 has no " in contract_absent(old)  # type: ignore[operator]
    assert contract_absent(new) is None
    assert contract_absent(other) is None  # not a NeMo-Gym at all: left to the import step (exit 2)


def test_a_revision_with_the_contract_is_not_contract_absent() -> None:
    revision = fetch_revision(parse_spec(str(DRIFT_FIXTURE)), DRIFT_FIXTURE)
    assert contract_absent(revision) is None


@pytest.mark.parametrize("spec", ["nemo-gym==0.0.1", "no-such-dir/"])
def test_genuine_setup_failures_stay_exit_2(tmp_path: Path, spec: str) -> None:
    report = run_gym_check(GymCheckOptions(spec=spec, offline=True, cache_dir=tmp_path), out_dir=tmp_path)
    assert (report.verdict, report.exit_code) == ("setup_failed", 2)
    assert report.reason is not None and report.reason.startswith("gym setup failed at ")
