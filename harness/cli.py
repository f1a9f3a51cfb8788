"""The `compactsim` command line: typer parses, rich renders; each command lives in harness/commands/.

Command modules import only typer, rich and light harness modules at import time; torch, ray,
fastapi and matplotlib load inside the command that needs them, so `compactsim --help`, `list`,
`show` and `schema` start fast (tests/unit/commands/test_cli_fast.py checks `sys.modules`).
"""

from __future__ import annotations

import importlib
from typing import Annotated

import typer

from compactsim.harness.core.gc_passes import use_fewer_gc_passes

app = typer.Typer(
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


_register_all()

__all__ = ["app"]
