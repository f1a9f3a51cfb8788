"""JUnit XML for CI systems: one test case per scenario, findings as the failure text (pure functions).

CI servers (GitHub Actions test reporters, GitLab, Jenkins, Buildkite) read JUnit XML to show
which scenario failed and why without anyone opening a log. `CaseResult` is the neutral shape
both `compactsim run` (scenario records) and `compactsim verify` (golden verdicts) are turned
into, so the XML and the Markdown summary (`compactsim.harness.report.markdown`) say the same thing.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

#: Characters XML 1.0 cannot carry at all (a finding quoting binary input must still yield valid XML).
_XML_INVALID = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


@dataclass(frozen=True, slots=True)
class CaseResult:
    """One scenario's outcome as a CI report shows it."""

    name: str
    passed: bool
    seconds: float = 0.0
    #: One line saying what went wrong (the failure's message attribute).
    summary: str = ""
    #: The findings, one per entry (the failure's text).
    findings: tuple[str, ...] = ()
    reproduce: str = ""
    #: Remarks that are not failures (e.g. fields a dump left unchecked).
    notes: tuple[str, ...] = field(default=())


def clean_xml_text(text: str) -> str:
    """`text` with the characters XML 1.0 forbids replaced by U+FFFD."""
    return _XML_INVALID.sub("\ufffd", text)


def cases_from_records(records: Sequence[Any]) -> list[CaseResult]:
    """`compactsim run`'s scenario records (`compactsim.harness.report.records.ScenarioRecord`) as cases."""
    out: list[CaseResult] = []
    for r in records:
        summary = "" if r.passed else r.outcome
        out.append(CaseResult(name=r.name, passed=bool(r.passed), seconds=float(r.seconds), summary=summary,
                              findings=tuple(str(f) for f in r.findings), reproduce=r.reproduce))
    return out


def cases_from_verify(report: Any, format_finding: Callable[[Any, Any], str]) -> list[CaseResult]:
    """`compactsim verify`'s verdicts (`compactsim.harness.golden.verify.VerifyReport`) as cases."""
    out: list[CaseResult] = []
    for v in report.scenarios:
        notes = tuple(f"not checked: {name} ({n})" for name, n in v.not_checked.items())
        summary = "" if v.passed else f"{len(v.findings)} finding(s) against the goldens"
        out.append(CaseResult(name=v.name, passed=bool(v.passed), summary=summary,
                              findings=tuple(format_finding(f, v) for f in v.findings),
                              reproduce=v.reproduce, notes=notes))
    return out


def format_junit_xml(cases: Sequence[CaseResult], *, suite: str, classname: str | None = None,
                     seconds: float | None = None) -> str:
    """A JUnit XML document: one <testsuite> named `suite`, one <testcase> per case, findings as failure text.

    `seconds`: the suite's time, the run's wall time; the cases' sum when not given."""
    failures = sum(1 for c in cases if not c.passed)
    total = sum(c.seconds for c in cases) if seconds is None else seconds
    root = ET.Element("testsuites", name="compactsim", tests=str(len(cases)), failures=str(failures), errors="0",
                      time=f"{total:.3f}")
    ts = ET.SubElement(root, "testsuite", name=suite, tests=str(len(cases)), failures=str(failures), errors="0",
                       skipped="0", time=f"{total:.3f}")
    for c in cases:
        tc = ET.SubElement(ts, "testcase", classname=classname or suite.replace(" ", "."), name=clean_xml_text(c.name),
                           time=f"{c.seconds:.3f}")
        if not c.passed:
            failure = ET.SubElement(tc, "failure", message=clean_xml_text(c.summary or "failed"),
                                    type="compactsim.findings")
            body = list(c.findings) + ([f"reproduce: {c.reproduce}"] if c.reproduce else [])
            failure.text = clean_xml_text("\n".join(body))
        extra = list(c.notes) + ([f"reproduce: {c.reproduce}"] if c.reproduce and c.passed else [])
        if extra:
            ET.SubElement(tc, "system-out").text = clean_xml_text("\n".join(extra))
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


__all__ = ["CaseResult", "cases_from_records", "cases_from_verify", "clean_xml_text", "format_junit_xml"]
