"""`compactsim run --junit-xml/--markdown`, the CI job summary, and one plain progress line per scenario without a TTY."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from compactsim.harness.cli import app
from compactsim.harness.commands.ci_outputs import prepare_ci_outputs
from compactsim.harness.core.errors import ConfigError
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


@pytest.mark.slow  # two scenarios on two worker processes
def test_the_reports_total_is_the_runs_wall_time_as_printed_not_the_sum_of_its_scenarios(tmp_path: Path):
    """Two scenarios side by side overlap: summing them overstated the run (273.6 s against a printed 145.6 s)."""
    result = runner.invoke(app, ["run", "no-compaction", "text-only-rollout", "--parallel", "2", "--out",
                                 str(tmp_path / "out"), "--junit-xml", str(tmp_path / "j.xml"), "--markdown",
                                 str(tmp_path / "s.md")], env={STEP_SUMMARY_ENV: ""})
    assert result.exit_code == 0, result.output
    printed = float(result.stdout.rsplit(" in ", 1)[1].split("s ·", 1)[0])
    root = ET.parse(tmp_path / "j.xml").getroot()
    # the same seconds, printed to 0.1 and written to 0.001 (8.1496 is "8.1" and "8.150"): up to 0.0505 apart
    assert float(root.get("time")) == float(root[0].get("time")) == pytest.approx(printed, abs=0.0505 + 1e-9)
    assert (tmp_path / "s.md").read_text().startswith(f"### ✅ compactsim run: 2/2 passed in {printed:.1f}s")


def test_a_report_path_that_cannot_be_written_exits_2_before_any_scenario_runs(tmp_path: Path):
    """It used to fail after the whole run, with the suite's folder already marked complete and passed."""
    (tmp_path / "afile").write_text("x")
    for option, path in (("--junit-xml", tmp_path / "afile" / "j.xml"), ("--markdown", tmp_path)):
        result = runner.invoke(app, ["run", "no-compaction", "--out", str(tmp_path / "out"), option, str(path)],
                               env={STEP_SUMMARY_ENV: ""})
        assert result.exit_code == 2, result.output
        assert f"{option} {path}: " in result.stderr
        assert not (tmp_path / "out").exists()
    result = runner.invoke(app, ["run", "no-compaction", "--out", str(tmp_path / "out")],
                           env={STEP_SUMMARY_ENV: str(tmp_path)})
    assert result.exit_code == 2 and f"${STEP_SUMMARY_ENV} {tmp_path}: cannot append the job summary there" in result.stderr


def test_an_earlier_runs_reports_are_gone_once_a_run_starts(tmp_path: Path):
    """Written outside --out, they survived an interrupted run: a CI reporter then read the previous run's verdict."""
    junit, markdown = tmp_path / "reports" / "junit.xml", tmp_path / "reports" / "summary.md"
    junit.parent.mkdir()
    junit.write_text("<testsuites><testsuite name='old' tests='1' failures='0'/></testsuites>")
    markdown.write_text("### ✅ old run")
    prepare_ci_outputs(junit, markdown)
    assert not junit.exists() and not markdown.exists()


def test_a_report_path_never_clears_anything_but_an_earlier_report(tmp_path: Path):
    """`--junit-xml rows.jsonl` deleted the rows dump it was about to read, a device node was replaced by a plain file
    and a symbolic link by a copy (CLI probe): only an earlier report is ever cleared."""
    rows, goldens = tmp_path / "rows.jsonl", tmp_path / "goldens"
    rows.write_text("{}\n")
    goldens.mkdir()
    (goldens / "manifest.json").write_text("{}")
    inputs = [(goldens, "the golden directory"), (rows, "the rows dump")]
    for junit, markdown, message in (
            (rows, None, f"--junit-xml {rows}: is the rows dump {rows}, which this command reads or writes"),
            (None, goldens / "manifest.json", f"--markdown {goldens / 'manifest.json'}: is inside the golden directory"),
            (tmp_path / "r.out", tmp_path / "r.out", f"--markdown {tmp_path / 'r.out'}: the same file as --junit-xml")):
        with pytest.raises(ConfigError, match=re.escape(message)):
            prepare_ci_outputs(junit, markdown, inputs=inputs)
    assert rows.read_text() == "{}\n" and (goldens / "manifest.json").read_text() == "{}"
    # a link keeps its link (its target, an earlier report, is emptied); a device is left alone
    target = tmp_path / "kept" / "junit.xml"
    target.parent.mkdir()
    target.write_text("<old verdict/>")
    link = tmp_path / "link.xml"
    link.symlink_to(target)
    prepare_ci_outputs(link, Path("/dev/null"))
    assert link.is_symlink() and target.read_text() == "" and Path("/dev/null").is_char_device()


def test_run_refuses_a_report_over_its_own_scenario_file_or_output_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    scenario = tmp_path / "mine.yaml"
    scenario.write_text("scenarios: []\n")
    for option, path, what in (("--junit-xml", "mine.yaml", "is the scenario file mine.yaml"),
                               ("--markdown", "out/summary.json", "is the output folder's own entry out/summary.json")):
        result = runner.invoke(app, ["run", "mine.yaml", "--out", "out", option, path], env={STEP_SUMMARY_ENV: ""})
        assert result.exit_code == 2, result.output
        assert f"{option} {path}: {what}" in result.stderr
    assert scenario.read_text() == "scenarios: []\n" and not (tmp_path / "out").exists()


@pytest.mark.parametrize("refused_line", [False, True], ids=["a run", "a refused command line"])
def test_a_report_path_inside_the_catalogue_is_never_written_or_deleted(refused_line: bool, tmp_path: Path):
    """A scenario selected by name is read from the catalogue: `--junit-xml` on one of its files overwrote it with
    XML (or, on a refused command line, deleted it), so its scenarios no longer loaded (fuzzing round 5)."""
    from compactsim.scenarios.catalogue import CATALOGUE_DIR

    target = sorted(CATALOGUE_DIR.glob("*.yaml"))[0]
    before = target.read_bytes()
    argv = ["run", "no-compaction", "--out", str(tmp_path / "o"), "--junit-xml", str(target)]
    result = CliRunner().invoke(app, argv + (["--bogus"] if refused_line else []))
    assert result.exit_code == 2, result.output
    assert target.read_bytes() == before
    if not refused_line:
        assert "is inside the scenario catalogue" in result.output
        assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("argv", [["run", "no-compaction", "--junit-xml", "loop", "--out", "o"],
                                  ["run", "no-compaction", "--out", "loop"],
                                  ["verify", "loop", "loop"],
                                  ["verify", "g", "rows.jsonl", "--markdown", "loop"]],
                         ids=["report", "out", "verify inputs", "verify report"])
def test_a_symbolic_link_loop_is_bad_input_not_a_traceback(argv: list[str], tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch):
    """`Path.resolve` raises RuntimeError on a loop (Python 3.11): a traceback and exit 1 (fuzzing round 5)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "loop").symlink_to("loop")
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert "cannot be resolved: a symbolic link loop" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
