"""CI-native outputs shared by `compactsim run` and `compactsim verify`: JUnit XML, Markdown, job summary, progress lines."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from compactsim.harness.core.errors import ConfigError


def format_progress_line(index: int, total: int, name: str, passed: bool, seconds: float) -> str:
    """``[3/85] scenario-name PASS 1.2s``: one plain line per finished scenario for logs without a terminal."""
    return f"[{index}/{total}] {name} {'PASS' if passed else 'FAIL'} {seconds:.1f}s"


def write_ci_outputs(cases: Sequence[Any], *, title: str, suite: str, junit_xml: Path | None,
                     markdown: Path | None) -> dict[str, Path]:
    """Write the JUnit XML and Markdown files asked for and append to $GITHUB_STEP_SUMMARY when set."""
    from compactsim.harness.report.junit import format_junit_xml
    from compactsim.harness.report.markdown import append_step_summary, format_markdown

    written: dict[str, Path] = {}
    text = format_markdown(cases, title=title)
    try:
        if junit_xml is not None:
            junit_xml.parent.mkdir(parents=True, exist_ok=True)
            junit_xml.write_text(format_junit_xml(cases, suite=suite), encoding="utf-8")
            written["junit_xml"] = junit_xml
        if markdown is not None:
            markdown.parent.mkdir(parents=True, exist_ok=True)
            markdown.write_text(text, encoding="utf-8")
            written["markdown"] = markdown
        summary = append_step_summary(text)
    except OSError as exc:
        raise ConfigError("invalid_argument", f"cannot write a CI report: {exc}") from None
    if summary is not None:
        written["step_summary"] = summary
    return written


__all__ = ["format_progress_line", "write_ci_outputs"]
