"""Under `--json`, a usage error (an option out of range, unknown, missing or not a number) is a
JSON error object on stdout and exit 2, like every other input error; without `--json` Typer's
usage box is unchanged. `use_json_usage_errors(app)` installs it on every command of the app."""

from __future__ import annotations

import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperCommand

from compactsim.harness.commands.common import OptionError, describe_range, report_error

try:  # Typer 0.2x carries its own copy of Click; older Typer uses Click itself
    from typer._click.exceptions import UsageError as _UsageError
except ImportError:  # pragma: no cover - depends on the installed Typer
    from click.exceptions import UsageError as _UsageError  # type: ignore[assignment,no-redef]


def _asks_for_json(command: Any, args: Sequence[str]) -> bool:
    """Whether `command` has a `--json` option and `args` (its own, as typed) give it before any `--`.

    A ``--json`` right after an option that takes a value is that value (``run --seed --json``:
    Click hands it to `--seed`), not the flag.
    """
    if not any("--json" in (getattr(p, "opts", None) or ()) for p in command.params):
        return False
    takes_value = {opt for p in command.params
                   if getattr(p, "param_type_name", None) == "option" and not getattr(p, "is_flag", False)
                   and not getattr(p, "count", False) for opt in getattr(p, "opts", ())}
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == "--":
            return False
        if arg == "--json":
            return True
        skip = arg in takes_value  # `--seed 3`; `--seed=3` carries its value inside
    return False


def _plain(value: Any) -> Any:
    """A value from argv as JSON can hold it: text, a list of texts, or None."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)


def option_error(exc: Any, command: Any, ctx: Any, args: Sequence[str]) -> OptionError:
    """Typer's usage error `exc` for `command` (given `args`) as an `OptionError`: the option, the value, its range."""
    param = getattr(exc, "param", None)
    option = getattr(exc, "option_name", None)  # an unknown option, or one missing its value
    value = minimum = maximum = None
    if param is not None:
        opts = [o for o in (getattr(param, "opts", None) or ()) if o.startswith("-")]
        long = [o for o in opts if o.startswith("--")]
        # an argument by the name Typer's own message gives it ("Missing argument 'rows_dump'")
        shown = getattr(param, "display_name_raw", None) or getattr(param, "human_readable_name", None) or param.name
        option = (long or opts or [shown])[0]
        # Typer ≥ 0.2x keeps the bounds on the parameter, older Typer on Click's IntRange / FloatRange type
        minimum = getattr(param, "min", None)
        maximum = getattr(param, "max", None)
        if minimum is None and maximum is None:
            minimum = getattr(getattr(param, "type", None), "min", None)
            maximum = getattr(getattr(param, "type", None), "max", None)
        seen = raw_values(command, ctx, args)  # best effort; the message still names the problem
        value = None if seen is None else _plain(seen.get(param.name))
    minimum, maximum = _plain(minimum), _plain(maximum)
    bounds = describe_range(minimum, maximum)
    message = exc.format_message()
    if isinstance(value, str):
        message += f"; got {value!r}"
    if bounds is not None:
        message += f"; allowed: {bounds}"
    return OptionError(message, option=option, value=value, minimum=minimum, maximum=maximum)


def raw_values(command: Any, ctx: Any, args: Sequence[str], *, lenient: bool = False) -> dict[str, Any] | None:
    """What `args` give each of `command`'s parameters, as typed (splitting argv converts nothing); None when argv
    cannot be split. `lenient`: unknown options are skipped, and an option missing its value, which can only be
    the last word, is left out."""
    parser = command.make_parser(ctx)
    parser.ignore_unknown_options = lenient
    attempts = [list(args)]
    if lenient and args and str(args[-1]).startswith("-"):
        attempts.append(list(args[:-1]))
    for attempt in attempts:
        try:
            return parser.parse_args(args=attempt)[0]
        except Exception:  # noqa: BLE001 - best effort: every caller treats an unsplittable argv as unknown
            continue
    return None


def _takes_paths(param: Any) -> bool:
    """Whether Typer converts `param`'s text to a `Path` (alone, optional, or in a list)."""
    pending = [getattr(getattr(param, "type_descriptor", None), "annotation", None)]
    while pending:
        annotation = pending.pop()
        if annotation is Path:
            return True
        pending.extend(typing.get_args(annotation))
    return False


def refuse_empty_paths(command: Any, ctx: Any, args: Sequence[str]) -> None:
    """A path option or argument given as ``''`` is refused as a usage error naming it.

    `Path('')` is `Path('.')`, so ``--out ''`` (an unset shell variable, say) would otherwise write
    into the current folder as if ``--out .`` had been typed.
    """
    seen = raw_values(command, ctx, args)
    if seen is None:
        return  # the real parse reports it
    for param in command.params:
        raw = seen.get(param.name)
        values = raw if isinstance(raw, (list, tuple)) else [raw]
        if "" in values and _takes_paths(param):
            raise typer.BadParameter("an empty path; name a file or folder ('.' for the current one)",
                                     ctx=ctx, param=param)


#: The report options whose earlier files a run deletes first (docs/ci.md: a reporter never reads an old verdict).
REPORT_OPTIONS = ("--junit-xml", "--markdown")


def clear_reports_after_usage_error(command: Any, ctx: Any, args: Sequence[str]) -> None:
    """Delete the earlier JUnit/Markdown reports `args` name although the command line was refused, as a run that
    starts does (`prepare_ci_outputs`), so exit 2 never leaves a stale verdict where a CI reporter reads this one's.

    Best effort and never destructive: every other value on the command line, given or defaulted, that names an
    existing file or folder counts as an input, as does the scenario catalogue, and a report that is (or lies
    inside) one is left alone.
    """
    from compactsim.harness.commands.ci_outputs import prepare_ci_outputs

    seen = raw_values(command, ctx, args, lenient=True)  # `--bogus` is the usage error; the reports around it count
    if seen is None:
        return
    reports: dict[str, str] = {}
    inputs: list[tuple[Path, str]] = []
    for param in command.params:
        opts = getattr(param, "opts", None) or ()
        raw = seen.get(param.name, param.default if isinstance(param.default, (str, Path)) else None)
        values = [v for v in (raw if isinstance(raw, (list, tuple)) else [raw]) if isinstance(v, (str, Path)) and v]
        report = next((o for o in opts if o in REPORT_OPTIONS), None)
        if report is not None and values:
            reports[report] = str(values[-1])
        elif report is None:
            inputs += [(Path(v), "a path on the command line") for v in values if Path(v).exists()]
    if not reports:
        return
    from compactsim.scenarios.catalogue import CATALOGUE_DIR

    inputs.append((CATALOGUE_DIR, "the scenario catalogue"))  # a name on the line selects files from there
    for option, value in reports.items():  # one at a time: a refused one does not keep the other
        try:
            prepare_ci_outputs(Path(value) if option == "--junit-xml" else None,
                               Path(value) if option == "--markdown" else None, inputs=inputs)
        except Exception:  # noqa: BLE001 - the usage error is what this exit reports
            pass


class _Command(TyperCommand):
    """Every compactsim command: under `--json`, a usage error is a JSON error object on stdout, exit 2.

    Typer checks options while parsing (`min=`/`max=`, integers, unknown options, missing
    arguments) and prints a usage box for a person; a `--json` run gets `OptionError.to_json`
    instead (the option, the value as typed, its range and Typer's message), the shape its other
    input errors have. Without `--json` nothing changes.
    """

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        given = list(args)  # the parser consumes the list it gets
        try:
            refuse_empty_paths(self, ctx, given)
            return super().parse_args(ctx, args)
        except _UsageError as exc:
            clear_reports_after_usage_error(self, ctx, given)
            if not _asks_for_json(self, given):
                raise
            raise typer.Exit(report_error(option_error(exc, self, ctx, given), as_json=True)) from None


def use_json_usage_errors(typer_app: typer.Typer) -> None:
    """Give every command of `typer_app` (and of its sub-apps) `_Command` unless it asked for another class."""
    for info in typer_app.registered_commands:
        if info.cls is None or info.cls is TyperCommand:
            info.cls = _Command
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            use_json_usage_errors(group.typer_instance)


__all__ = ["option_error", "use_json_usage_errors"]
