"""`compactsim scenarios`: list the named scenario catalogue and show one scenario in full.

    compactsim scenarios list                 # table: name, tags, expected verdict, purpose
    compactsim scenarios list --json --tag compaction
    compactsim scenarios show image-compaction-k2-rolling
    compactsim scenarios show summary-twice --json
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from compactsim.harness.commands.common import ExitCode, console, print_json, report_error
from compactsim.harness.core.errors import CompactsimError


def format_table(rows: list[dict[str, Any]]) -> Table:
    """The catalogue as a rich table (pure: rows in, table out)."""
    table = Table(title=f"{len(rows)} scenarios", show_lines=False, expand=False)
    for column in ("name", "tags", "expected", "purpose"):
        table.add_column(column, overflow="fold")
    for r in rows:
        table.add_row(escape(r["name"]), escape(", ".join(r["tags"])), escape(r["expected"]), escape(r["purpose"]))
    return table


def describe(scenario: Any) -> dict[str, Any]:
    """What `show --json` prints: the summary, the scenario as data, and what it resolves to."""
    from compactsim.scenarios.build import slots

    return {
        **scenario.summary(),
        "rollouts_per_step": [s.rollout_id for s in slots(scenario, 0)],
        "trainer": scenario.trainer_config().model_dump(mode="json"),
        "scenario": scenario.to_data(),
    }


def list_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print the list as JSON (name, tags, purpose, expected).")] = False,
    tag: Annotated[list[str] | None, typer.Option("--tag", help="Only scenarios with this tag (repeatable).")] = None,
) -> None:
    """List every catalogue scenario with its one-line purpose and expected verdict."""
    from compactsim.harness.commands.selection import check_names
    from compactsim.scenarios.catalogue import default_catalogue

    try:
        catalogue = default_catalogue()
        check_names(list(tag or ()), catalogue)  # `--tag` also takes scenario names (Catalogue.select)
        chosen = catalogue.select(list(tag)) if tag else catalogue.scenarios
    except CompactsimError as exc:
        raise typer.Exit(report_error(exc, as_json=as_json)) from None
    rows = [s.summary() for s in chosen]
    if as_json:
        print_json(rows)
    else:
        console.print(format_table(rows))


def show_command(
    name: Annotated[str, typer.Argument(help="Scenario name (see `compactsim scenarios list`).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the resolved scenario as JSON.")] = False,
) -> None:
    """Show one scenario: its YAML entry, rollout ids, expected verdict and resolved trainer settings."""
    from compactsim.harness.commands.selection import check_names
    from compactsim.scenarios.catalogue import default_catalogue, dump_scenario

    try:
        catalogue = default_catalogue()
        check_names([name], catalogue, tags=False)
        scenario = catalogue.get(name)
        info = describe(scenario)
    except CompactsimError as exc:
        raise typer.Exit(report_error(exc, as_json=as_json)) from None
    if as_json:
        print_json({**info, "source": catalogue.sources[name]})
        return
    console.print(f"[bold]{escape(scenario.name)}[/bold] — {escape(scenario.purpose)}")
    console.print(f"expected: {escape(info['expected'])}   steps: {scenario.steps}   mode: {scenario.mode}   "
                  f"source: {escape(catalogue.sources[name])}")
    console.print(f"rollouts per step: {escape(', '.join(info['rollouts_per_step']))}")
    console.print(escape(dump_scenario(scenario)), end="")


def register(app: typer.Typer) -> None:
    group = typer.Typer(name="scenarios", help="The named scenario catalogue.", no_args_is_help=True,
                        add_completion=False, pretty_exceptions_enable=False)
    group.command("list")(list_command)
    group.command("show")(show_command)
    app.add_typer(group, name="scenarios")


__all__ = ["ExitCode", "describe", "format_table", "list_command", "register", "show_command"]
