"""`compactsim train SCENARIO`: GRPO training against the mock policy server, metrics and artifacts per step.

    compactsim train pr-validation-image-compaction-k2 --steps 20 --seed 0 --out runs/k2
    compactsim train pr-validation-no-compaction --steps 20 --dtype float32 --out runs/flat32
    compactsim train pr-validation-image-compaction-k2 --async --out runs/k2-async --wandb

Writes `metrics.jsonl`, `timings.jsonl`, `artifacts/step-NNNN.{npz,json}`, `rollouts/`,
`config.json` and `train_summary.json` under `--out` (see `compactsim.harness.train_run`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from compactsim.harness.commands.common import (
    MAX_DP_SIZE,
    MAX_MICRO_BATCH_SIZE,
    MAX_SEED,
    MAX_STEPS,
    ExitCode,
    console,
    print_json,
    report_error,
    use_cwd_imports,
)
from compactsim.harness.core import metrics as M
from compactsim.harness.core.errors import CompactsimError
from compactsim.harness.outputs import claim_output_dir, train_owns


def format_step(record: Any) -> str:
    """One progress line: step, rows, loss, token_mult_prob_error − 1, grad norm, lr, seconds."""
    m = record.metrics
    return (
        f"step {record.step:3d}  rows {record.num_rows:3d}  loss {m['loss']:+.6f}  "
        f"tmpe-1 {m[M.TOKEN_MULT_PROB_ERROR] - 1:+.3e}  grad_norm {m[M.GRAD_NORM]:.4f}  lr {m[M.LR]:.2e}  "
        f"version {record.policy_version}  {record.timings[M.TIMING_STEP]:.2f}s"
    )


def format_summary(summary: Any) -> Table:
    """The run in one table."""
    table = Table(title=f"train {summary.scenario}", show_header=False)
    table.add_column("field")
    table.add_column("value")
    dev = summary.max_token_mult_prob_error_dev
    ok = "[green]within[/green]" if dev <= summary.tolerance else "[yellow]above[/yellow]"
    rows = [
        ("seed / device / dtype", f"{summary.seed} / {summary.device} / {summary.dtype}"),
        ("mode", "async" if summary.async_mode else "sync"),
        ("optimizer steps / scheduler increments", f"{summary.optimizer_steps} / {summary.scheduler_steps}"),
        ("final policy version", str(summary.final_policy_version)),
        ("rows / tokens trained", f"{summary.total_rows} / {summary.total_tokens}"),
        ("max |token_mult_prob_error - 1|", f"{dev:.3e} ({ok} {summary.tolerance:g})"),
        ("seconds", f"{summary.seconds:.1f}"),
        ("output", summary.out or "-"),
    ]
    for field, value in rows:
        table.add_row(field, value)
    return table


def train_command(
    scenario: Annotated[str, typer.Argument(help="training scenario, e.g. pr-validation-image-compaction-k2")],
    out: Annotated[Path, typer.Option("--out", help="directory for metrics, artifacts and rollouts")],
    steps: Annotated[int | None, typer.Option(min=1, max=MAX_STEPS, help="optimizer steps (default: the scenario's, "
                                              "20 for the reference runs)")] = None,
    seed: Annotated[int, typer.Option(min=0, max=MAX_SEED, help="run seed: weights, rollouts, rewards and server "
                                                               "answers derive from it")] = 0,
    device: Annotated[str, typer.Option(help="cpu, cuda, or auto (cuda when present)")] = "cpu",
    dtype: Annotated[str, typer.Option(help="float64 (exact recompute), float32 or bfloat16")] = "float64",
    async_mode: Annotated[bool, typer.Option("--async", help="async GRPO: replay buffer, groups up to 1 step old, IS correction")] = False,
    server: Annotated[str, typer.Option(help="inprocess (no port) or http (uvicorn on 127.0.0.1)")] = "inprocess",
    dp_size: Annotated[int | None, typer.Option(min=1, max=MAX_DP_SIZE, help="simulated data-parallel ranks (rows "
                                                "are sharded as ranks would)")] = None,
    micro_batch_size: Annotated[int | None, typer.Option(min=1, max=MAX_MICRO_BATCH_SIZE,
                                                         help="rows per microbatch")] = None,
    backend: Annotated[str | None, typer.Option(help="backend under test as module:attr (default: the reference pipeline)")] = None,
    save_rollouts: Annotated[bool, typer.Option(help="write every step's Gym results and ground-truth logs")] = True,
    wandb: Annotated[bool, typer.Option("--wandb", help="also log to Weights & Biases, offline, under OUT/wandb")] = False,
    json_output: Annotated[bool, typer.Option("--json", help="print the summary as JSON")] = False,
    force: Annotated[bool, typer.Option("--force", help="write into a --out holding other files (only train's own "
                                                        "files are replaced)")] = False,
) -> None:
    """Train a scenario for N optimizer steps with the mock policy server in the loop."""
    from compactsim.harness.pipeline.backend import load_backend
    from compactsim.harness.train_run import load_run_config, resolve_device, run_training

    use_cwd_imports()
    overrides: dict[str, Any] = {}
    if dp_size is not None:
        overrides["dp_size"] = dp_size
    if micro_batch_size is not None:
        overrides["train_micro_batch_size"] = micro_batch_size
    try:
        from compactsim.harness.commands.selection import check_selectors

        check_selectors([scenario])
        run = load_run_config(
            scenario, seed=seed, steps=steps, device=device, dtype=dtype, async_mode=async_mode, server=server,
            save_rollouts=save_rollouts, wandb=wandb, trainer_overrides={"policy": overrides} if overrides else {},
        )
        chosen = load_backend(backend) if backend else None
        resolve_device(run.device)  # --device cuda without a GPU: exit 2 before --out is created
        # a bad --out fails now, not at the first artifact; an earlier run's step files go, a user's are refused
        claim_output_dir(out, owns=train_owns, command="train", force=force)
        show = None if json_output else (lambda record: console.print(format_step(record), markup=False))
        summary = run_training(run, out, backend=chosen, on_step=show)
    except CompactsimError as exc:
        raise typer.Exit(report_error(exc, as_json=json_output)) from None
    if json_output:
        print_json({**summary.to_json(), "out": summary.out, "seconds": summary.seconds})
    else:
        console.print(format_summary(summary))
    raise typer.Exit(ExitCode.OK)


def register(app: typer.Typer) -> None:
    from compactsim.harness.core.json_input import limits_help

    app.command("train", epilog=limits_help())(train_command)


__all__ = ["format_step", "format_summary", "register", "train_command"]
