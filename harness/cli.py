"""The `compactsim` command line: typer parses, rich renders; each command lives in harness/commands/."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="compactsim",
    help="Deterministic harness for training context-compacted agent rollouts with GRPO.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)



@app.callback()
def _main() -> None:
    """Deterministic harness for training context-compacted agent rollouts with GRPO."""


#: Command modules, each exposing `register(app)`. Missing optional modules are skipped so a
#: partially built tree still runs the commands it has.
_COMMANDS: tuple[str, ...] = (
    "harness.commands.plan",
    "harness.commands.materialize",
    "harness.commands.serve",
    "harness.commands.rollout",
    "harness.commands.gym_check",
    "harness.commands.train",
    "harness.commands.run",
    "harness.commands.scenarios",
    "harness.commands.export",
    "harness.commands.schema",
    "harness.commands.verify",
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
