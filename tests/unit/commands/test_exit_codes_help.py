"""Every command's `--help` states its exit codes (README: "`compactsim COMMAND --help` | ... exit codes")."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from compactsim.harness.cli import app
from compactsim.harness.commands.exit_codes import EXIT_CODES


def _leaf_commands() -> set[str]:
    def walk(command, path: tuple[str, ...]):
        subs = getattr(command, "commands", None)
        if not subs:
            yield " ".join(path)
        for name, sub in (subs or {}).items():
            yield from walk(sub, (*path, name))

    return set(walk(typer.main.get_command(app), ()))


def test_the_table_names_every_command_and_nothing_else():
    assert set(EXIT_CODES) == _leaf_commands()


@pytest.mark.parametrize("command", sorted(EXIT_CODES))
def test_help_ends_with_the_exit_codes(command: str):
    result = CliRunner().invoke(app, [*command.split(), "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # rich wraps the epilog
    assert f"Exit codes: {EXIT_CODES[command]}." in text, text[-400:]
