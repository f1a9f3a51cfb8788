"""`compactsim rollout`: run scripted rollouts and write their Gym evidence and ground-truth logs.

    compactsim rollout --policy recency-images-k2 --turns 6 --seed 7 --out runs/demo
    compactsim rollout --policy summary-at3-at5 --turns 8 --rollouts 4 --flavour gym-pr2870 --out runs/sum

Writes, per rollout, ``<rollout_id>.result.json`` (Gym's `/run` result in the chosen flavour) and
``<rollout_id>.ground_truth.json`` (what was sent and received, where it compacted and why), plus
``summary.json``. The mock model and reward servers run in-process; nothing listens on a port.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from harness.commands.common import ExitCode, console, err_console, print_json
from harness.core.errors import CompactsimError, ConfigError

FLAVOUR_CHOICES = ("gym-0.7.0-transport", "gym-0.7.0-full", "gym-pr2870", "osworld", "none")
PATTERNS = ("screens", "shapes", "repeated", "reordered")


def build_specs(
    *,
    policy: str,
    turns: int,
    seed: int,
    rollouts: int,
    flavour: str,
    images_per_observation: int,
    image_pattern: str,
    task_id: str = "task-0",
) -> list[Any]:
    """One group of `rollouts` rollouts of the same scripted task (rollout i uses seed + i for its pixels)."""
    from agents import RolloutScript, RolloutSpec, policy_preset, scripted_turns
    from harness.core.seeds import check_seed

    check_seed(seed)
    if turns < 1:
        raise ConfigError("invalid_argument", f"--turns={turns}: expected >= 1")
    if rollouts < 1:
        raise ConfigError("invalid_argument", f"--rollouts={rollouts}: expected >= 1")
    if flavour not in FLAVOUR_CHOICES:
        raise ConfigError("invalid_argument", f"--flavour={flavour!r}: expected one of {list(FLAVOUR_CHOICES)}")
    if image_pattern not in PATTERNS:
        raise ConfigError("invalid_argument", f"--image-pattern={image_pattern!r}: expected one of {list(PATTERNS)}")
    history = policy_preset(policy)
    specs = []
    for i in range(rollouts):
        script = RolloutScript(
            turns=scripted_turns(seed, turns=turns, images_per_observation=images_per_observation,
                                 image_pattern=image_pattern)  # type: ignore[arg-type]
        )
        specs.append(
            RolloutSpec(
                rollout_id=f"rollout-{seed}-{i}",
                group_id=f"group-{seed}",
                task_id=task_id,
                rollout_index=i,
                attempt_index=0,
                seed=seed + i,
                script=script,
                context_history=history,
                flavour=flavour,  # type: ignore[arg-type]
            )
        )
    return specs


def format_summary(rows: list[dict[str, Any]]) -> Table:
    """One line per rollout: calls, boundaries, expected physical traces (or error), images, reward, status."""
    table = Table(title="rollouts", show_lines=False)
    for col in ("rollout", "status", "calls", "boundaries at", "traces (turns)", "images", "reward"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["rollout_id"],
            r["status"] if r["status"] == "completed" else f"[red]{r['status']}: {r['failure']['kind']}[/red]",
            str(r["num_calls"]),
            ",".join(map(str, r["boundary_turns"])) or "-",
            " ".join("[" + ",".join(map(str, t)) + "]" for t in r["traces"])
            or f"[yellow]{r['expected_error']}[/yellow]",
            str(r["num_images"]),
            "-" if r["reward"] is None else f"{r['reward']:g}",
        )
    return table


def _expected_traces(gt: dict[str, Any]) -> dict[str, Any]:
    """The traces a consumer should plan for this flavour, or the error it should raise instead."""
    expected = gt["expected"]
    flavour = gt["rollout"]["flavour"]
    if flavour == "none":
        if expected["single_trace_ok"]:
            return {"traces": [[c["turn_id"] for c in gt["calls"]]], "expected_error": None}
        turn = expected["first_discontinuity"]["turn_id"]
        return {"traces": [], "expected_error": f"undeclared_discontinuity at turn {turn}"}
    key = "segments_by_tokens" if flavour == "osworld" else "segments_declared"
    return {"traces": [seg["turn_ids"] for seg in expected[key]], "expected_error": None}


def _summary_row(collected: Any, files: dict[str, str]) -> dict[str, Any]:
    gt = collected.ground_truth
    return {
        "rollout_id": collected.rollout_id,
        "status": collected.status,
        "failure": gt["outcome"]["failure"],
        "stop_reason": gt["outcome"]["stop_reason"],
        "num_calls": gt["outcome"]["num_calls"],
        "boundary_turns": [c["turn_id"] for c in gt["calls"] if c["compaction"]["boundary"] is not None],
        **_expected_traces(gt),
        "num_images": len(gt["media"]),
        "reward": gt["outcome"]["reward"],
        "files": files,
    }


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


def pretty_json(value: Any, indent: int = 0) -> str:
    """Indented JSON that keeps lists of scalars (token ids, logprobs, route rows) on one line."""
    pad, inner = " " * indent, " " * (indent + 2)
    if isinstance(value, dict):
        if not value:
            return "{}"
        body = ",\n".join(f"{inner}{json.dumps(k, ensure_ascii=False)}: {pretty_json(v, indent + 2)}" for k, v in value.items())
        return "{\n" + body + "\n" + pad + "}"
    if isinstance(value, list):
        if all(_scalar(v) for v in value) or all(isinstance(v, list) and all(map(_scalar, v)) for v in value):
            return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
        body = ",\n".join(inner + pretty_json(v, indent + 2) for v in value)
        return "[\n" + body + "\n" + pad + "]"
    return json.dumps(value, ensure_ascii=False)


def write_outputs(collected: list[Any], out: Path) -> list[dict[str, Any]]:
    """Write every result and ground-truth log (pretty JSON, stable bytes) and `summary.json`."""
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for c in collected:
        files: dict[str, str] = {}
        if c.result is not None:
            files["result"] = f"{c.rollout_id}.result.json"
            (out / files["result"]).write_text(pretty_json(c.result) + "\n", encoding="utf-8")
        files["ground_truth"] = f"{c.rollout_id}.ground_truth.json"
        (out / files["ground_truth"]).write_text(pretty_json(c.ground_truth) + "\n", encoding="utf-8")
        rows.append(_summary_row(c, files))
    (out / "summary.json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return rows


def rollout_command(
    out: Annotated[Path, typer.Option("--out", help="directory for the result, ground-truth and summary files")],
    policy: Annotated[str, typer.Option(help="compaction preset, e.g. identity, recency-images-k2, "
                                              "recency-images-k2-chunked3, summary-at3-at5, think-strip")] = "recency-images-k2",
    turns: Annotated[int, typer.Option(help="model calls per rollout (the last one answers without a tool call)")] = 6,
    seed: Annotated[int, typer.Option(help="run seed: script arguments, images and sampled logprobs derive from it")] = 0,
    rollouts: Annotated[int, typer.Option(help="rollouts in the group (same task, rollout_index 0..N-1)")] = 1,
    flavour: Annotated[str, typer.Option(help="evidence shape: " + ", ".join(FLAVOUR_CHOICES))] = "gym-0.7.0-transport",
    images_per_observation: Annotated[int, typer.Option(help="screenshots returned by each tool call")] = 1,
    image_pattern: Annotated[str, typer.Option(help="screens, shapes (same shape, new colour), repeated, reordered")] = "screens",
    reward_pattern: Annotated[str, typer.Option(help="comma-separated rewards by rollout index, cycled")] = "1,0",
    executor: Annotated[str, typer.Option(help="local (threads) or ray (actors on 127.0.0.1)")] = "local",
    workers: Annotated[int, typer.Option(help="worker threads or Ray actors; results do not depend on it")] = 2,
    json_output: Annotated[bool, typer.Option("--json", help="print the summary as JSON")] = False,
) -> None:
    """Run scripted rollouts against the in-process mock servers and write evidence + ground truth."""
    from agents import InProcessServers, collect, make_executor, server_script

    try:
        specs = build_specs(policy=policy, turns=turns, seed=seed, rollouts=rollouts, flavour=flavour,
                            images_per_observation=images_per_observation, image_pattern=image_pattern)
        try:
            pattern = [float(x) for x in reward_pattern.split(",") if x.strip()]
        except ValueError:
            raise ConfigError("invalid_argument", f"--reward-pattern={reward_pattern!r}: expected numbers like 1,0") from None
        if not pattern:
            raise ConfigError("invalid_argument", "--reward-pattern: expected at least one number")
        if executor not in ("local", "ray"):
            raise ConfigError("invalid_argument", f"--executor={executor!r}: expected local or ray")
        if workers < 1:
            raise ConfigError("invalid_argument", f"--workers={workers}: expected >= 1")
        servers = InProcessServers(
            model_settings={"seed": seed, "script": server_script(specs)},
            reward_settings={"rule": {"kind": "pattern", "pattern": pattern}},
        )
        collected = collect(specs, servers, executor=make_executor(executor, workers))  # type: ignore[arg-type]
        rows = write_outputs(collected, out)
    except CompactsimError as exc:
        err_console.print(f"[red]{getattr(exc, 'code', 'error')}[/red]: {exc}", markup=True)
        raise typer.Exit(ExitCode.ERROR) from None
    if json_output:
        print_json(rows)
    else:
        console.print(format_summary(rows))
        console.print(f"wrote {len(rows)} rollout(s) to {out}")
    failed = [r for r in rows if r["status"] != "completed"]
    raise typer.Exit(ExitCode.FINDINGS if failed else ExitCode.OK)


def register(app: typer.Typer) -> None:
    app.command("rollout")(rollout_command)


__all__ = ["build_specs", "format_summary", "pretty_json", "register", "rollout_command", "write_outputs"]
