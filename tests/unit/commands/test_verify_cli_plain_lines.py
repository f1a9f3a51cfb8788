"""`compactsim verify` without a terminal (CI logs): one plain line per golden scenario on stderr, as `run` prints.

With a terminal there are none, and `--json` keeps stdout pure JSON and prints no such line either.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from compactsim.harness.cli import app

runner = CliRunner()
NAMES = ("no-compaction", "scripted-three-steps")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("goldens")
    result = runner.invoke(app, ["export", *NAMES, "--seed", "0", "--steps", "1", "--out", str(root / "g"),
                                 "--reference-dump", str(root / "ref"), "--parallel", "1", "--json"])
    assert result.exit_code == 0, result.output
    return root / "g", root / "ref"


def _plain(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("[")]


def test_a_passing_dump_prints_one_match_line_per_scenario_in_golden_order(exported):
    golden, ref = exported
    result = runner.invoke(app, ["verify", str(golden), str(ref / "rows.jsonl"), "--metrics", str(ref / "metrics.jsonl")])
    assert result.exit_code == 0, result.output
    assert _plain(result.stderr) == ["[1/2] no-compaction PASS match", "[2/2] scripted-three-steps PASS match"]
    assert "2/2 scenarios match the goldens · 0 finding(s)" in result.stdout
    assert not _plain(result.stdout)


def test_a_failing_scenario_line_counts_its_findings(exported, tmp_path: Path):
    golden, ref = exported
    lines = [json.loads(ln) for ln in (ref / "rows.jsonl").read_text().splitlines() if ln.strip()]
    for ln in lines:  # swap the owners of rollouts 0 and 1: one row.owner finding per affected row (4)
        if ln["scenario"] == "scripted-three-steps" and ln["step"] == 0 and ln["parent_index"] in (0, 1):
            ln["parent_index"] = 1 - ln["parent_index"]
    bad = tmp_path / "rows.jsonl"
    bad.write_text("".join(json.dumps(ln) + "\n" for ln in lines))
    result = runner.invoke(app, ["verify", str(golden), str(bad)])
    assert result.exit_code == 1
    assert _plain(result.stderr) == ["[1/2] no-compaction PASS match", "[2/2] scripted-three-steps FAIL 4 finding(s)"]
    assert "1/2 scenarios match the goldens · 4 finding(s)" in result.stdout


def test_scenario_option_numbers_only_the_scenarios_checked(exported):
    golden, ref = exported
    result = runner.invoke(app, ["verify", str(golden), str(ref / "rows.jsonl"), "--scenario", "scripted-three-steps"])
    assert result.exit_code == 0, result.output
    assert _plain(result.stderr) == ["[1/1] scripted-three-steps PASS match"]


def test_json_output_stays_pure_json_with_no_plain_lines(exported):
    golden, ref = exported
    result = runner.invoke(app, ["verify", str(golden), str(ref / "rows.jsonl"), "--json"])
    assert result.exit_code == 0, result.output
    assert [s["scenario"] for s in json.loads(result.stdout)["scenarios"]] == list(NAMES)
    assert result.stderr == ""


def test_a_terminal_gets_no_plain_lines(exported, monkeypatch: pytest.MonkeyPatch):
    import compactsim.harness.commands.verify as verify_module

    monkeypatch.setattr(verify_module, "err_console", Console(stderr=True, force_terminal=True, highlight=False))
    golden, ref = exported
    result = runner.invoke(app, ["verify", str(golden), str(ref / "rows.jsonl")])
    assert result.exit_code == 0, result.output
    assert _plain(result.stderr) == []
