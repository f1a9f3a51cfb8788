"""JUnit XML and Markdown summaries for CI (pure formatters) and their use by `run` and `verify`."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from compactsim.harness.commands.ci_outputs import format_progress_line, write_ci_outputs
from compactsim.harness.commands.verify import format_finding
from compactsim.harness.report.junit import CaseResult, cases_from_verify, clean_xml_text, format_junit_xml
from compactsim.harness.report.markdown import STEP_SUMMARY_ENV, append_step_summary, format_markdown, step_summary_path
from tests.unit.golden.golden_builders import dump_lines
from tests.unit.golden.test_verify import line, verify

PASS = CaseResult(name="no-compaction", passed=True, seconds=1.25, reproduce="compactsim run no-compaction --seed 0")
FAIL = CaseResult(name="k2 | rolling", passed=False, seconds=2.5, summary="expected success, observed success, 2 finding(s)",
                  findings=("[row.tokens] row r0/trace-1 token 3: 4 != 99", "bad \x00 byte"),
                  reproduce="compactsim run k2 --seed 0")


def test_junit_xml_has_one_case_per_scenario_and_findings_as_failure_text():
    root = ET.fromstring(format_junit_xml([PASS, FAIL], suite="compactsim run"))
    assert (root.tag, root.attrib) == ("testsuites", {"name": "compactsim", "tests": "2", "failures": "1", "errors": "0",
                                                      "time": "3.750"})
    (suite,) = root
    assert suite.attrib == {"name": "compactsim run", "tests": "2", "failures": "1", "errors": "0", "skipped": "0",
                            "time": "3.750"}
    ok, bad = suite
    assert ok.attrib == {"classname": "compactsim.run", "name": "no-compaction", "time": "1.250"}
    assert ok.find("failure") is None
    assert ok.find("system-out").text == "reproduce: compactsim run no-compaction --seed 0"
    failure = bad.find("failure")
    assert failure.attrib == {"message": "expected success, observed success, 2 finding(s)", "type": "compactsim.findings"}
    assert failure.text == ("[row.tokens] row r0/trace-1 token 3: 4 != 99\nbad \ufffd byte\n"
                            "reproduce: compactsim run k2 --seed 0")


def test_clean_xml_text_replaces_only_forbidden_characters():
    assert clean_xml_text("a\x00b\x1fc\td\ne") == "a\ufffdb\ufffdc\td\ne"


def test_markdown_lists_failures_first_with_details_and_escaped_cells():
    text = format_markdown([PASS, FAIL], title="compactsim run")
    assert text.splitlines()[:5] == [
        "### ❌ compactsim run: 1/2 passed in 3.8s",
        "",
        "| scenario | verdict | seconds | findings |",
        "|---|---|---:|---:|",
        "| k2 \\| rolling | **FAIL** | 2.50 | 2 |",
    ]
    assert "| no-compaction | pass | 1.25 | 0 |" in text
    assert "<details><summary><b>k2 \\| rolling</b>: expected success, observed success, 2 finding(s)</summary>" in text
    assert "```text\n[row.tokens] row r0/trace-1 token 3: 4 != 99\nbad \x00 byte\n```" in text
    assert "reproduce: `compactsim run k2 --seed 0`" in text


def test_markdown_all_passing_has_no_details():
    assert format_markdown([PASS], title="t") == ("### ✅ t: 1/1 passed in 1.2s\n\n| scenario | verdict | seconds | findings |\n"
                                                 "|---|---|---:|---:|\n| no-compaction | pass | 1.25 | 0 |\n")


def test_step_summary_is_appended_only_when_the_variable_is_set(tmp_path: Path):
    target = tmp_path / "summary.md"
    target.write_text("earlier step\n")
    assert step_summary_path({}) is None and append_step_summary("x", {}) is None
    assert append_step_summary("## mine", {STEP_SUMMARY_ENV: str(target)}) == target
    assert target.read_text() == "earlier step\n## mine\n"


def test_progress_line_is_plain():
    assert format_progress_line(3, 85, "no-compaction", True, 1.234) == "[3/85] no-compaction PASS 1.2s"
    assert format_progress_line(4, 85, "k2", False, 10.0) == "[4/85] k2 FAIL 10.0s"


def test_verify_report_becomes_cases_with_formatted_findings(tmp_path: Path, monkeypatch):
    lines = dump_lines()
    line(lines, "r0/trace-1")["input_ids"][3] = 99
    report = verify(lines)
    (case,) = cases_from_verify(report, format_finding)
    assert (case.name, case.passed, case.summary) == ("toy", False, "1 finding(s) against the goldens")
    assert case.findings == ("[row.tokens] scenario toy · step 0 · rollout r0 · row r0/trace-1 · token 3: "
                             + report.findings[0].message + " — expected 4, actual 99 (dump line 2)",)
    summary = tmp_path / "gh.md"
    monkeypatch.setenv(STEP_SUMMARY_ENV, str(summary))
    written = write_ci_outputs([case], title="compactsim verify", suite="compactsim verify",
                               junit_xml=tmp_path / "r" / "v.xml", markdown=tmp_path / "v.md")
    assert written == {"junit_xml": tmp_path / "r" / "v.xml", "markdown": tmp_path / "v.md", "step_summary": summary}
    suite = ET.parse(tmp_path / "r" / "v.xml").getroot()[0]
    assert [(tc.get("name"), tc.find("failure") is not None) for tc in suite] == [("toy", True)]
    assert summary.read_text() == (tmp_path / "v.md").read_text()


@pytest.mark.parametrize("where", ["the input", "inside an input folder", "the markdown report"])
def test_the_job_summary_is_never_an_input_or_a_report(where: str, tmp_path: Path, monkeypatch):
    """$GITHUB_STEP_SUMMARY pointed at a golden manifest appended the Markdown to it, breaking the goldens."""
    from compactsim.harness.commands.ci_outputs import prepare_ci_outputs
    from compactsim.harness.core.errors import ConfigError

    rows, goldens = tmp_path / "rows.jsonl", tmp_path / "g"
    rows.write_text("{}\n")
    goldens.mkdir()
    (goldens / "manifest.json").write_text("{}")
    target = {"the input": rows, "inside an input folder": goldens / "manifest.json",
              "the markdown report": tmp_path / "v.md"}[where]
    monkeypatch.setenv(STEP_SUMMARY_ENV, str(target))
    with pytest.raises(ConfigError, match=r"\$GITHUB_STEP_SUMMARY"):
        prepare_ci_outputs(None, tmp_path / "v.md", inputs=[(rows, "the rows dump"), (goldens, "the golden directory")])
    assert rows.read_text() == "{}\n" and (goldens / "manifest.json").read_text() == "{}"
