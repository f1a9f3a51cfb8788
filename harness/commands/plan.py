"""`compactsim plan FILE`: show how each rollout in a file splits into physical traces."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from compactsim.harness.commands.common import ExitCode, console, located, located_results, print_json, report_error
from compactsim.harness.core.errors import CompactsimError, ContractError
from compactsim.harness.core.json_input import limits_help

if TYPE_CHECKING:  # the pipeline (and torch) load only when the command runs, so `compactsim --help` stays fast
    from compactsim.harness.core.trace_plan import TracePlan


def format_plan_table(plans: list[TracePlan]) -> Table:
    """A readable table: one line per physical trace, violations underneath."""
    table = Table(title="trace plans", show_lines=False)
    for col in ("rollout", "path", "trace", "turns", "media", "start", "tokens", "sampled"):
        table.add_column(col, overflow="fold")
    for plan in plans:
        for t in plan.traces:
            table.add_row(
                plan.rollout_id,
                plan.path,
                str(t.trace_index),
                ",".join(map(str, t.turn_ids)),
                ",".join(t.media_ids) or "-",
                t.start_reason,
                str(t.num_tokens),
                str(t.num_sampled_tokens),
            )
        for v in plan.violations:
            table.add_row(plan.rollout_id, "[red]violation[/red]", "", str(v.turn_id or ""), "", v.code, "", "")
    return table


def plan_command(
    files: Annotated[list[Path], typer.Argument(help="files each holding one Gym result, a JSON list, or JSON lines")],
    json_output: Annotated[bool, typer.Option("--json", help="print the plans as JSON")] = False,
    no_strict: Annotated[
        bool, typer.Option("--no-strict", help="never stop on a violation: list them all (plans are then not trainable)")
    ] = False,
) -> None:
    """Plan logical → physical traces for every rollout in FILES."""
    from compactsim.harness.pipeline.planner import plan_rollout

    try:
        plans = []
        for result, where in located_results(files):
            try:
                plans.append(plan_rollout(result, strict=not no_strict))
            except ContractError as exc:
                raise located(exc, where) from None
    except CompactsimError as exc:
        raise typer.Exit(report_error(exc, as_json=json_output)) from None
    if json_output:
        print_json([p.to_json() for p in plans] if len(plans) != 1 else plans[0].to_json())
    else:
        console.print(format_plan_table(plans))
    raise typer.Exit(ExitCode.OK)


def register(app: typer.Typer) -> None:
    app.command("plan", epilog=limits_help())(plan_command)
