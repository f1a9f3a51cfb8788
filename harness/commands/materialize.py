"""`compactsim materialize FILE...`: show the training rows a batch of Gym results becomes."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from compactsim.harness.commands.common import (
    MAX_DP_SIZE,
    MAX_MICRO_BATCH_SIZE,
    MAX_SEQ_DIVISIBLE_BY,
    ExitCode,
    console,
    located,
    located_results,
    print_json,
    report_error,
)
from compactsim.harness.core.contract import INT32_LIMIT
from compactsim.harness.core.errors import CompactsimError, ConfigError, ContractError
from compactsim.harness.core.json_input import limits_help

if TYPE_CHECKING:  # torch and the pipeline load only when the command runs (fast `compactsim --help`)
    from compactsim.harness.core.batch import TraceBatch
    from compactsim.harness.core.trace_plan import TracePlan


def format_batch_json(batch: TraceBatch) -> dict[str, Any]:
    """`{"rows": [...], "metrics": {...}}`; positions index the row's tokens, spans are [start, end)."""
    rows: list[dict[str, Any]] = []
    parents = batch.parent_indices.tolist()
    lengths = batch.row_input_lengths.tolist()
    for r, parent in enumerate(parents):
        rows.append(
            {
                "parent_index": parent,
                "logical_rollout_id": batch.row_logical_rollout_id[r],
                "physical_trace_id": batch.row_physical_trace_id[r],
                "input_length": lengths[r],
                "mask_spans": [list(span) for span in batch.row_mask_spans[r]],
                "advantage": batch.logical[parent].advantage if parent >= 0 else 0.0,
                "media_ids": list(batch.row_media_ids[r]),
                "sentinel_positions": list(batch.row_sentinel_positions[r]),
            }
        )
    return {"rows": rows, "metrics": batch.metrics()}


def format_batch_table(batch: TraceBatch) -> Table:
    """One line per row (padding rows included), as a person reads them."""
    table = Table(title=f"trace batch: {batch.num_rows} rows × {batch.seq_len} tokens", show_lines=False)
    for col in ("row", "parent", "rollout", "trace", "length", "mask spans", "advantage", "media", "sentinels"):
        table.add_column(col, overflow="fold")
    for r, row in enumerate(format_batch_json(batch)["rows"]):
        table.add_row(
            str(r),
            str(row["parent_index"]),
            row["logical_rollout_id"] or "(padding)",
            row["physical_trace_id"] or "-",
            str(row["input_length"]),
            " ".join(f"[{a},{b})" for a, b in row["mask_spans"]) or "-",
            f"{row['advantage']:.6g}",
            ",".join(row["media_ids"]) or "-",
            ",".join(map(str, row["sentinel_positions"])) or "-",
        )
    return table


def _plans(files: list[Path], missing_reward: float) -> list[TracePlan]:
    from compactsim.harness.pipeline.ingest import normalize_result
    from compactsim.harness.pipeline.planner import plan_rollout

    plans: list[TracePlan] = []
    for result, where in located_results(files):
        try:
            evidence = normalize_result(result)
            if evidence.reward is None:  # a bare response carries no reward; inspection still works
                evidence = replace(evidence, reward=missing_reward)
            plans.append(plan_rollout(evidence))
        except ContractError as exc:
            raise located(exc, where) from None
    return plans


def _check_reward(value: float) -> None:
    """`--missing-reward` is a reward: finite and within ±2**53 (click's FLOAT takes "nan" and "inf")."""
    from compactsim.harness.core.contract import FLOAT_EXACT_INT

    if not (math.isfinite(value) and abs(value) <= FLOAT_EXACT_INT):
        raise ConfigError("invalid_argument", f"--missing-reward={value!r}: expected a finite reward within ±2**53")


def materialize_command(
    files: Annotated[list[Path], typer.Argument(help="Gym results: one object, a JSON list, or JSON lines per file")],
    json_output: Annotated[bool, typer.Option("--json", help="print rows and metrics as JSON")] = False,
    num_generations: Annotated[
        int | None, typer.Option("--num-generations", min=1, max=INT32_LIMIT - 1,
                                 help="require groups of exactly this many rollouts")
    ] = None,
    dp_size: Annotated[int, typer.Option("--dp-size", min=1, max=MAX_DP_SIZE, help="data-parallel ranks (row padding)")] = 1,
    micro_batch_size: Annotated[
        int, typer.Option("--micro-batch-size", min=1, max=MAX_MICRO_BATCH_SIZE, help="rows per microbatch")
    ] = 1,
    seq_divisible_by: Annotated[
        int, typer.Option("--seq-divisible-by", min=1, max=MAX_SEQ_DIVISIBLE_BY,
                          help="pad the sequence length to a multiple of this")
    ] = 1,
    leave_one_out: Annotated[
        bool, typer.Option("--leave-one-out/--no-leave-one-out", help="leave-one-out GRPO baseline")
    ] = True,
    missing_reward: Annotated[
        float, typer.Option("--missing-reward", help="reward assumed for a bare response that carries none")
    ] = 0.0,
) -> None:
    """Plan and materialize every rollout in FILE... as one batch; print each row."""
    from compactsim.harness.pipeline.advantages import compute_logical_advantages
    from compactsim.harness.pipeline.materializer import prepare_trace_batch
    from compactsim.harness.pipeline.train_config import AdvantageConfig, MaterializeConfig

    try:
        _check_reward(missing_reward)
        plans = _plans(files, missing_reward)
        logical = compute_logical_advantages(
            [p.evidence for p in plans],
            AdvantageConfig(use_leave_one_out_baseline=leave_one_out, num_generations_per_prompt=num_generations),
        )
        batch = prepare_trace_batch(
            plans,
            None,
            logical,
            MaterializeConfig(
                dp_size=dp_size,
                micro_batch_size=micro_batch_size,
                make_sequence_length_divisible_by=seq_divisible_by,
                num_generations_per_prompt=num_generations,
            ),
        )
    except CompactsimError as exc:
        raise typer.Exit(report_error(exc, as_json=json_output)) from None
    if json_output:
        print_json(format_batch_json(batch))
    else:
        console.print(format_batch_table(batch))
    raise typer.Exit(ExitCode.OK)


def register(app: typer.Typer) -> None:
    app.command("materialize", epilog=limits_help())(materialize_command)
