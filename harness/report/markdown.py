"""A Markdown summary of a run or a verify for CI job pages (GitHub's $GITHUB_STEP_SUMMARY), as pure functions.

One table row per scenario (failures first, so a long suite shows what matters at the top), then
a collapsible block per failing scenario with its findings and reproduction command. The text
stays short: at most `MAX_FINDINGS` findings per scenario (the rest are in summary.json or
`--json`), and cells are escaped so a `|` in a finding cannot break the table.
"""

from __future__ import annotations

import html
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from compactsim.harness.report.junit import CaseResult

#: The environment variable naming GitHub Actions' job-summary file.
STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"
#: Findings listed per failing scenario.
MAX_FINDINGS = 10


def _cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").strip()


def _fence(lines: Sequence[str]) -> str:
    body = "\n".join(lines)
    ticks = "```"
    while ticks in body:
        ticks += "`"
    return f"{ticks}text\n{body}\n{ticks}"


def format_markdown(cases: Sequence[CaseResult], *, title: str, seconds: float | None = None) -> str:
    """The summary: headline, one table row per case (failures first), details of each failure.

    `seconds`: the headline's time, the run's wall time (what the command printed); the cases' sum
    when not given (cases run side by side overlap, so their sum overstates the run)."""
    passed = sum(1 for c in cases if c.passed)
    mark = "✅" if passed == len(cases) else "❌"
    total = sum(c.seconds for c in cases) if seconds is None else seconds
    out = [f"### {mark} {title}: {passed}/{len(cases)} passed" + (f" in {total:.1f}s" if total else ""), ""]
    out += ["| scenario | verdict | seconds | findings |", "|---|---|---:|---:|"]
    for c in sorted(cases, key=lambda c: (c.passed, c.name)):
        out.append(f"| {_cell(c.name)} | {'pass' if c.passed else '**FAIL**'} | {c.seconds:.2f} | {len(c.findings)} |")
    failing = [c for c in cases if not c.passed]
    for c in sorted(failing, key=lambda c: c.name):
        name, summary = html.escape(_cell(c.name), quote=False), html.escape(_cell(c.summary or "failed"), quote=False)
        out += ["", f"<details><summary><b>{name}</b>: {summary}</summary>", ""]
        lines = list(c.findings[:MAX_FINDINGS])
        if len(c.findings) > MAX_FINDINGS:
            lines.append(f"… {len(c.findings) - MAX_FINDINGS} more")
        if lines:
            out += [_fence(lines), ""]
        if c.reproduce:
            out += [f"reproduce: `{c.reproduce}`", ""]
        out.append("</details>")
    notes = [(c.name, n) for c in cases for n in c.notes]
    if notes:
        out += ["", "Notes:", ""] + [f"- {_cell(name)}: {_cell(note)}" for name, note in notes]
    return "\n".join(out) + "\n"


def step_summary_path(environ: Mapping[str, str] | None = None) -> Path | None:
    """The CI job-summary file to append to, when the CI names one."""
    value = (os.environ if environ is None else environ).get(STEP_SUMMARY_ENV, "")
    return Path(value) if value.strip() else None


def append_step_summary(markdown: str, environ: Mapping[str, str] | None = None) -> Path | None:
    """Append `markdown` to $GITHUB_STEP_SUMMARY when it is set (returns the file, or None)."""
    path = step_summary_path(environ)
    if path is None:
        return None
    with path.open("a", encoding="utf-8") as fh:
        fh.write(markdown if markdown.endswith("\n") else markdown + "\n")
    return path


__all__ = ["MAX_FINDINGS", "STEP_SUMMARY_ENV", "append_step_summary", "format_markdown", "step_summary_path"]
