"""CI-native outputs shared by `compactsim run` and `compactsim verify`: JUnit XML, Markdown, job summary, progress lines."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from compactsim.harness.core.errors import ConfigError


def format_progress_line(index: int, total: int, name: str, passed: bool, seconds: float) -> str:
    """``[3/85] scenario-name PASS 1.2s``: one plain line per finished scenario for logs without a terminal."""
    return f"[{index}/{total}] {name} {'PASS' if passed else 'FAIL'} {seconds:.1f}s"


def _report_paths(junit_xml: Path | None, markdown: Path | None) -> list[tuple[str, Path]]:
    return [(option, path) for option, path in (("--junit-xml", junit_xml), ("--markdown", markdown)) if path is not None]


def _resolved(path: Path, what: str) -> Path:
    """`path.resolve()`, or a `ConfigError` naming `what` (a symbolic link loop raises `RuntimeError` on 3.11)."""
    try:
        return path.resolve()
    except (RuntimeError, OSError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "a symbolic link loop"
        raise ConfigError("invalid_argument", f"{what} {path}: cannot be resolved: {reason}") from None


def _refuse_an_input(name: str, target: Path, sources: Sequence[tuple[Path, Path, str]], advice: str) -> None:
    """`ConfigError` when the resolved `target` is one of the resolved `sources` (given, resolved, what) or inside one."""
    for given, source, what in sources:
        if target == source or source in target.parents:
            inside = "" if target == source else " inside"
            raise ConfigError("invalid_argument", f"{name}: is{inside} {what} {given}, which this command reads or "
                                                  f"writes; {advice}")


def prepare_ci_outputs(junit_xml: Path | None, markdown: Path | None, *,
                       inputs: Sequence[tuple[Path, str]] = ()) -> None:
    """Before any work: each report path can be written (`ConfigError` naming its option otherwise, exit 2), and a
    report left there by an earlier run is cleared, so an interrupted run never leaves another run's verdict
    where a CI reads this one's. $GITHUB_STEP_SUMMARY, when set, must be a file this process can append to.

    Nothing but an earlier report is ever cleared: a path that is one of the command's `inputs` (path, what it
    is: a rows dump, a scenario file) or lies inside an input folder (the goldens, ``--out``), or the other
    report's path, is refused before anything is touched. An existing regular file is deleted; a symbolic link
    keeps its link and has its target emptied; a device or pipe (``/dev/stdout``, ``/dev/null``) holds no old
    verdict and is left alone, written at the end.
    """
    from compactsim.harness.report.markdown import STEP_SUMMARY_ENV, step_summary_path

    reports = [(option, path, _resolved(path, option)) for option, path in _report_paths(junit_xml, markdown)]
    sources = [(given, _resolved(given, what), what) for given, what in inputs]
    targets: dict[Path, str] = {}
    for option, path, target in reports:  # every check before the first deletion
        if target in targets:
            raise ConfigError("invalid_argument", f"{option} {path}: the same file as {targets[target]}; give each "
                                                  "report its own path")
        targets[target] = f"{option} {path}"
        _refuse_an_input(f"{option} {path}", target, sources, "write the report elsewhere")
        if target.is_dir():
            raise ConfigError("invalid_argument", f"{option} {path}: is a directory")
    for option, path, target in reports:
        try:
            if target.exists() and not target.is_file():
                continue  # a device or a pipe: no earlier verdict to clear, written at the end
            if path.is_symlink():
                if target.exists():
                    target.open("w").close()  # an earlier report, emptied; the link stays
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.unlink(missing_ok=True)  # an earlier run's report: gone until this run writes its own
            path.touch()  # writable here: a report that cannot be written fails now, not after the run
            path.unlink()
        except OSError as exc:
            raise ConfigError("invalid_argument", f"{option} {path}: cannot write the report there: "
                                                  f"{exc.strerror or type(exc).__name__}") from None
    summary = step_summary_path()
    if summary is not None:
        target = _resolved(summary, f"${STEP_SUMMARY_ENV}")
        # appended to, never cleared: still never one of the inputs
        _refuse_an_input(f"${STEP_SUMMARY_ENV} {summary}", target, sources, "point it elsewhere")
        if target in targets:
            raise ConfigError("invalid_argument", f"${STEP_SUMMARY_ENV} {summary}: the same file as "
                                                  f"{targets[target]}; give the job summary its own path")
        try:
            with summary.open("a", encoding="utf-8"):
                pass
        except OSError as exc:
            raise ConfigError("invalid_argument", f"${STEP_SUMMARY_ENV} {summary}: cannot append the job summary there: "
                                                  f"{exc.strerror or type(exc).__name__}") from None


def write_ci_outputs(cases: Sequence[Any], *, title: str, suite: str, junit_xml: Path | None,
                     markdown: Path | None, seconds: float | None = None) -> dict[str, Path]:
    """Write the JUnit XML and Markdown files asked for and append to $GITHUB_STEP_SUMMARY when set.

    `seconds`: the run's wall time, the reports' total (the cases' sum when not given)."""
    from compactsim.harness.report.junit import format_junit_xml
    from compactsim.harness.report.markdown import STEP_SUMMARY_ENV, append_step_summary, format_markdown

    written: dict[str, Path] = {}
    text = format_markdown(cases, title=title, seconds=seconds)
    option = ""
    try:
        if junit_xml is not None:
            option = f"--junit-xml {junit_xml}"
            junit_xml.parent.mkdir(parents=True, exist_ok=True)
            junit_xml.write_text(format_junit_xml(cases, suite=suite, seconds=seconds), encoding="utf-8")
            written["junit_xml"] = junit_xml
        if markdown is not None:
            option = f"--markdown {markdown}"
            markdown.parent.mkdir(parents=True, exist_ok=True)
            markdown.write_text(text, encoding="utf-8")
            written["markdown"] = markdown
        option = f"${STEP_SUMMARY_ENV}"
        summary = append_step_summary(text)
    except OSError as exc:
        raise ConfigError("invalid_argument", f"{option}: cannot write the CI report: "
                                              f"{exc.strerror or type(exc).__name__}") from None
    if summary is not None:
        written["step_summary"] = summary
    return written


__all__ = ["format_progress_line", "prepare_ci_outputs", "write_ci_outputs"]
