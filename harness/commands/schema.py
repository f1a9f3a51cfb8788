"""`compactsim schema [NAME]`: print a JSON Schema shipped with compactsim (rows dump, metrics dump, golden files).

    compactsim schema rows-dump > rows-dump.schema.json     # what an external trainer's dump must match
    compactsim schema                                       # list the schema names
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from compactsim.harness.commands.common import ExitCode, console, report_error
from compactsim.harness.core.errors import CompactsimError


def schema_command(
    name: Annotated[str | None, typer.Argument(help="rows-dump, metrics-dump, manifest, expectation, expected-rows, "
                                                    "payload or scenario (default: list them)")] = None,
) -> None:
    """Print the JSON Schema called NAME exactly as shipped (or list every schema)."""
    from compactsim.harness.golden.schema import SCHEMA_NAMES, load_schema, schema_text

    if name is None:
        table = Table(title="compactsim schema NAME")
        table.add_column("name")
        table.add_column("describes", overflow="fold")
        for n in SCHEMA_NAMES:
            table.add_row(n, escape(str(load_schema(n).get("title", ""))))
        console.print(table)
        raise typer.Exit(ExitCode.OK)
    try:
        text = schema_text(name)
    except CompactsimError as exc:
        raise typer.Exit(report_error(exc, as_json=False)) from None
    sys.stdout.write(text)
    sys.stdout.flush()
    raise typer.Exit(ExitCode.OK)


def register(app: typer.Typer) -> None:
    app.command("schema")(schema_command)


__all__ = ["register"]
