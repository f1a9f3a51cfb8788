"""`compactsim run --junit-xml/--markdown`, the CI job summary, and one plain progress line per scenario without a TTY."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from typer.testing import CliRunner

from compactsim.harness.cli import app
from compactsim.harness.report.markdown import STEP_SUMMARY_ENV

runner = CliRunner()


def test_run_writes_junit_markdown_and_step_summary_with_plain_progress(tmp_path: Path):
    summary = tmp_path / "step-summary.md"
    summary.write_text("")
    result = runner.invoke(app, ["run", "no-compaction", "--out", str(tmp_path / "out"), "--junit-xml",
                                 str(tmp_path / "junit.xml"), "--markdown", str(tmp_path / "summary.md")],
                           env={STEP_SUMMARY_ENV: str(summary)})
    assert result.exit_code == 0, result.output
    progress = [ln for ln in result.stderr.splitlines() if ln.startswith("[")]
    assert len(progress) == 1 and progress[0].startswith("[1/1] no-compaction PASS ") and progress[0].endswith("s")
    suite = ET.parse(tmp_path / "junit.xml").getroot()[0]
    assert (suite.get("name"), suite.get("tests"), suite.get("failures")) == ("compactsim run", "1", "0")
    assert [(tc.get("classname"), tc.get("name"), tc.find("failure")) for tc in suite] == [
        ("compactsim.run", "no-compaction", None)]
    markdown = (tmp_path / "summary.md").read_text()
    assert markdown.startswith("### ✅ compactsim run: 1/1 passed in ")
    assert "| no-compaction | pass |" in markdown
    assert summary.read_text() == markdown
