"""The `compactsim` command line: typer parses, rich renders; each command lives in harness/commands/.

Command modules import only typer, rich and light harness modules at import time; torch, ray,
fastapi and matplotlib load inside the command that needs them, so `compactsim --help`, `list`,
`show` and `schema` start fast (tests/unit/commands/test_cli_fast.py checks `sys.modules`).
"""

from __future__ import annotations

import importlib
import sys
from typing import Annotated, Any

import typer

from compactsim.harness.commands.exit_codes import add_exit_codes
from compactsim.harness.commands.usage_errors import use_json_usage_errors
from compactsim.harness.core.gc_passes import use_fewer_gc_passes


def safe_output_streams() -> None:
    """Make stdout and stderr unable to fail on any text compactsim prints.

    Ids, file names and messages come from user input (a payload's rollout id, a dump's trace id,
    a non-UTF-8 file name from argv) and may hold lone surrogates. A strict UTF-8 stream makes rich
    raise UnicodeEncodeError mid-table; the C locale's ``surrogateescape`` writes invalid UTF-8.
    ``backslashreplace`` prints such a character as ``\\ud800`` and leaves all other text as it
    was. The rich consoles of `compactsim.harness.commands.common` write to whatever `sys.stdout` /
    `sys.stderr` are when they print, so they inherit this too.
    """
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is None:  # not a text file (None under pythonw, a StringIO): nothing is encoded
            continue
        try:
            reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError, OSError):  # a stream that cannot change its error handler
            pass


class _App(typer.Typer):
    """`typer.Typer` whose entry point makes the output streams safe first (`safe_output_streams`).

    Covers what is printed before any command runs (e.g. "No such command" for a non-UTF-8 name);
    the app callback covers `typer.testing.CliRunner`, which invokes the commands without this.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        safe_output_streams()
        try:
            return super().__call__(*args, **kwargs)
        except SystemExit as exc:
            _exit_at_once_when_signalled(exc.code)
            raise
        except OSError as exc:
            _exit_when_stdout_failed(exc)
            raise


def _exit_when_stdout_failed(exc: OSError) -> None:
    """Standard output that cannot be written (``> /dev/full``, a full disk): one line on stderr and exit 2 (a setup
    failure), not a traceback and not exit 1, which means findings. Any other OSError propagates unchanged, as does
    a reader that left (EPIPE: `| head`), which the streams' own handling already keeps quiet.

    The failing write is recognised by the stream it wrote to: the innermost frame names `sys.stdout` or holds it,
    or an object writing to it (a rich console's ``file``).
    """
    import errno
    import linecache
    import os

    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None or exc.errno == errno.EPIPE:
        return
    out, frame = sys.stdout, tb.tb_frame
    source = linecache.getline(frame.f_code.co_filename, tb.tb_lineno)
    if "sys.stdout" not in source and not any(v is out or getattr(v, "file", None) is out for v in frame.f_locals.values()):
        return
    try:
        sys.stderr.write(f"compactsim: cannot write to standard output: {exc.strerror or type(exc).__name__}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(2)


def _exit_at_once_when_signalled(code: Any) -> None:
    """After a SIGTERM or SIGINT ended a run (its folder already says interrupted): flush and leave now.

    The interpreter's own shutdown after such an exit sometimes aborted (SIGABRT, "terminate called
    without an active exception": a native thread still running when its owner was destroyed) and
    turned exit 143 into 134. Nothing is left to do by then: the run's folder was marked when the
    signal arrived, and its worker processes were stopped on the way out.
    """
    from compactsim.harness.outputs import terminated

    if not terminated():
        return
    import os

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(code if isinstance(code, int) else 1)


app = _App(
    name="compactsim",
    help="Deterministic harness for training context-compacted agent rollouts with GRPO.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def installed_version() -> str:
    """compactsim's version as installed (package metadata), "unknown" when run from a bare source tree."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("compactsim")
    except PackageNotFoundError:
        return "unknown"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"compactsim {installed_version()}")
        raise typer.Exit(0)


@app.callback()
def _main(
    version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                          help="Print compactsim's version and exit.")] = False,
) -> None:
    """Deterministic harness for training context-compacted agent rollouts with GRPO.

    Exit codes: 0 success, 1 findings, 2 bad input / usage / setup, 3 Gym drift.
    """
    safe_output_streams()  # before any command prints user-supplied text
    use_fewer_gc_passes()  # this process is ours: large JSON trees, fewer collector passes (gc_passes)


#: Command modules, each exposing `register(app)`. Missing optional modules are skipped so a
#: partially built tree still runs the commands it has.
_COMMANDS: tuple[str, ...] = (
    "compactsim.harness.commands.plan",
    "compactsim.harness.commands.materialize",
    "compactsim.harness.commands.serve",
    "compactsim.harness.commands.rollout",
    "compactsim.harness.commands.gym_check",
    "compactsim.harness.commands.train",
    "compactsim.harness.commands.run",
    "compactsim.harness.commands.scenarios",
    "compactsim.harness.commands.export",
    "compactsim.harness.commands.schema",
    "compactsim.harness.commands.verify",
)


def _register_all() -> None:
    for name in _COMMANDS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        module.register(app)
    use_json_usage_errors(app)
    add_exit_codes(app)


_register_all()

__all__ = ["app", "safe_output_streams"]
