"""`compactsim rollout`: run scripted rollouts and write their Gym evidence and ground-truth logs.

    compactsim rollout --policy recency-images-k2 --turns 6 --seed 7 --out runs/demo
    compactsim rollout --policy summary-at3-at5 --turns 8 --rollouts 4 --flavour gym-pr2870 --out runs/sum
    compactsim rollout --scenario scripted-three-steps --step 1 --seed 7 --out runs/s1

Writes, per rollout, ``<rollout_id>.result.json`` (Gym's `/run` result in the chosen flavour) and
``<rollout_id>.ground_truth.json`` (what was sent and received, where it compacted and why), plus
``summary.json``. The mock model and reward servers run in-process; nothing listens on a port.

With ``--scenario`` the rollouts are one step of a catalogue scenario (ids ``s{step}-g{group}-r{index}``),
exactly as `compactsim run` collects them; the result files hold them as the agents emitted them,
before the scenario's mutation or batch corruption (if any) edits what the trainer receives. The
scenario defines its rollouts, so the options that describe rollouts (``--policy``, ``--turns``, ...)
are refused with it. A policy-mode scenario's later steps depend on weights trained at the earlier
steps, so only its step 0 can be collected here (`compactsim run` collects the others).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.table import Table

from compactsim.harness.commands.common import (
    MAX_IMAGES_PER_OBSERVATION,
    MAX_ROLLOUTS,
    MAX_SEED,
    MAX_STEPS,
    MAX_TURNS,
    MAX_WORKERS,
    ExitCode,
    console,
    err_console,
    print_json,
    report_error,
    rich_escape,
)
from compactsim.harness.core.errors import CompactsimError, ConfigError
from compactsim.harness.outputs import claim_output_dir, rollout_owns

FLAVOUR_CHOICES = ("gym-0.7.0-transport", "gym-0.7.0-full", "gym-pr2870", "osworld", "none")
PATTERNS = ("screens", "shapes", "repeated", "reordered")
#: Options of the `--policy` form that describe the rollouts (parameter name → flag); a scenario defines its own.
ROLLOUT_OPTIONS: dict[str, str] = {
    "policy": "--policy",
    "turns": "--turns",
    "rollouts": "--rollouts",
    "flavour": "--flavour",
    "images_per_observation": "--images-per-observation",
    "image_pattern": "--image-pattern",
    "reward_pattern": "--reward-pattern",
}


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
    from compactsim.agents import RolloutScript, RolloutSpec, policy_preset, scripted_turns
    from compactsim.agents.rollout.script import check_image_pattern
    from compactsim.harness.core.seeds import check_seed

    check_seed(seed)
    if turns < 1:
        raise ConfigError("invalid_argument", f"--turns={turns}: expected >= 1")
    if rollouts < 1:
        raise ConfigError("invalid_argument", f"--rollouts={rollouts}: expected >= 1")
    if flavour not in FLAVOUR_CHOICES:
        raise ConfigError("invalid_argument", f"--flavour={flavour!r}: expected one of {list(FLAVOUR_CHOICES)}")
    if image_pattern not in PATTERNS:
        raise ConfigError("invalid_argument", f"--image-pattern={image_pattern!r}: expected one of {list(PATTERNS)}")
    try:
        check_image_pattern(image_pattern, images_per_observation)
    except ValueError:
        raise ConfigError("invalid_argument", f"--image-pattern={image_pattern!r} shows two images per observation: "
                                              f"--images-per-observation={images_per_observation} needs to be 2 or "
                                              "more") from None
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


def scenario_step(name: str, *, step: int, seed: int | None) -> Any:
    """The catalogue scenario `name` (under `seed` when given), checked to have a collectable step `step`."""
    from compactsim.harness.commands.selection import check_names
    from compactsim.harness.core.seeds import check_seed
    from compactsim.scenarios.catalogue import default_catalogue, get_scenario

    check_names([name], default_catalogue(), tags=False)  # "did you mean" by edit distance
    scenario = get_scenario(name)
    if seed is not None:
        scenario = scenario.with_seed(check_seed(seed))
    if not 0 <= step < scenario.steps:
        raise ConfigError("invalid_argument", f"--step={step}: scenario {name!r} has steps 0..{scenario.steps - 1}")
    if scenario.mode == "policy" and step > 0:
        raise ConfigError("invalid_argument", f"--step={step}: scenario {name!r} runs in policy mode, so step {step}'s "
                          f"rollouts come from weights trained at steps 0..{step - 1}; `compactsim run {name} "
                          f"--steps {step + 1}` collects them (results/step-{step:04d}.jsonl)")
    return scenario


def collect_scenario_step(scenario: Any, step: int, *, executor: str = "local", workers: int = 1) -> list[Any]:
    """Every rollout of one scenario step (slot order, failed ones included) from fresh in-process servers."""
    from compactsim.agents import collect, make_executor
    from compactsim.scenarios.build import step_specs
    from compactsim.scenarios.execute import in_process_servers

    return collect(step_specs(scenario, step), in_process_servers(scenario),
                   executor=make_executor(executor, workers))  # type: ignore[arg-type]


def batch_edits(scenario: Any, step: int) -> list[str]:
    """How the scenario edits step `step`'s results before the trainer receives them (none for most scenarios)."""
    from compactsim.scenarios.build import rollout_id

    notes = []
    m = scenario.mutation
    if m is not None and m.step == step:
        notes.append(f"mutation {m.name} edits {rollout_id(step, m.group, m.index)}")
    c = scenario.corruption
    if c is not None and c.step == step:
        notes.append(f"batch corruption {c.kind} hits {rollout_id(step, c.group, c.index)}")
    return notes


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


def _explicit(ctx: typer.Context, names: Mapping[str, str]) -> list[str]:
    """The flags among `names` (parameter name → flag) given on the command line (compared by name: typer vendors click)."""
    return [flag for name, flag in names.items()
            if getattr(ctx.get_parameter_source(name), "name", None) == "COMMANDLINE"]


def rollout_command(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option("--out", help="directory for the result, ground-truth and summary files")],
    scenario: Annotated[str | None, typer.Option(help="a catalogue scenario: collect one step of its rollouts "
                                                      "(instead of --policy, --turns, ...)")] = None,
    step: Annotated[int, typer.Option(min=0, max=MAX_STEPS - 1, help="with --scenario: the step whose rollouts "
                                      "to collect (below the scenario's steps)")] = 0,
    policy: Annotated[str, typer.Option(help="compaction preset, e.g. identity, recency-images-k2, "
                                              "recency-images-k2-chunked3, summary-at3-at5, think-strip")] = "recency-images-k2",
    turns: Annotated[int, typer.Option(min=1, max=MAX_TURNS, help="model calls per rollout (the last one answers "
                                                                 "without a tool call)")] = 6,
    seed: Annotated[int, typer.Option(min=0, max=MAX_SEED, help="run seed: script arguments, images and sampled "
                                      "logprobs derive from it (with --scenario: default the scenario's own)")] = 0,
    rollouts: Annotated[int, typer.Option(min=1, max=MAX_ROLLOUTS, help="rollouts in the group (same task, "
                                                                       "rollout_index 0..N-1)")] = 1,
    flavour: Annotated[str, typer.Option(help="evidence shape: " + ", ".join(FLAVOUR_CHOICES))] = "gym-0.7.0-transport",
    images_per_observation: Annotated[int, typer.Option(min=0, max=MAX_IMAGES_PER_OBSERVATION,
                                                        help="screenshots returned by each tool call")] = 1,
    image_pattern: Annotated[str, typer.Option(help="screens, shapes (same shape, new colour), repeated, reordered")] = "screens",
    reward_pattern: Annotated[str, typer.Option(help="comma-separated rewards by rollout index, cycled (finite, "
                                                     "at most 2**53 in magnitude)")] = "1,0",
    executor: Annotated[str, typer.Option(help="local (threads), processes (spawned workers, beyond the GIL) or ray "
                                               "(actors on 127.0.0.1)")] = "local",
    workers: Annotated[int, typer.Option(min=1, max=MAX_WORKERS, help="worker threads, processes or Ray actors; "
                                         "results do not depend on it")] = 2,
    json_output: Annotated[bool, typer.Option("--json", help="print the summary as JSON")] = False,
    force: Annotated[bool, typer.Option("--force", help="write into a --out holding other files (only rollout's own "
                                                        "files are replaced)")] = False,
) -> None:
    """Run scripted rollouts (or one step of a catalogue scenario) in-process; write evidence + ground truth."""
    from compactsim.agents import InProcessServers, collect, make_executor, server_script

    if scenario is not None:
        given = _explicit(ctx, ROLLOUT_OPTIONS)
        if given:
            _usage_error(f"options --scenario and {'/'.join(given)} are mutually exclusive: the scenario defines "
                         "its rollouts")
        seed_given = bool(_explicit(ctx, {"seed": "--seed"}))
        _scenario_command(scenario, step=step, seed=seed if seed_given else None, out=out, executor=executor,
                          workers=workers, json_output=json_output, force=force)
    if _explicit(ctx, {"step": "--step"}):
        _usage_error("option --step needs --scenario (the --policy form has one step)")
    try:
        specs = build_specs(policy=policy, turns=turns, seed=seed, rollouts=rollouts, flavour=flavour,
                            images_per_observation=images_per_observation, image_pattern=image_pattern)
        pattern = parse_reward_pattern(reward_pattern)
        _check_executor(executor)
        if workers < 1:
            raise ConfigError("invalid_argument", f"--workers={workers}: expected >= 1")
        # a bad --out fails now, not after every rollout ran; an earlier run's rollout files go, a user's are refused
        claim_output_dir(out, owns=rollout_owns, command="rollout", force=force)
        servers = InProcessServers(
            model_settings={"seed": seed, "script": server_script(specs)},
            reward_settings={"rule": {"kind": "pattern", "pattern": pattern}},
        )
        collected = collect(specs, servers, executor=make_executor(executor, workers))  # type: ignore[arg-type]
        rows = write_outputs(collected, out)
    except CompactsimError as exc:
        raise typer.Exit(report_error(exc, as_json=json_output)) from None
    _finish(rows, out, json_output)


def parse_reward_pattern(text: str) -> list[float]:
    """`--reward-pattern` as floats: finite and within ±2**53, the bounds the pipeline accepts a reward in.

    `float()` takes "nan", "inf" and "1e400" (inf); such a reward would reach the trainer as a
    rollout the planner refuses, so it is a usage error here instead.
    """
    from compactsim.harness.core.contract import FLOAT_EXACT_INT

    items = [x.strip() for x in text.split(",")]
    if not any(items):
        raise ConfigError("invalid_argument", "--reward-pattern: expected at least one number")
    if "" in items:  # "1,,2" is a typo, not the pattern 1,2: the rollout indices would shift silently
        raise ConfigError("invalid_argument", f"--reward-pattern={text!r}: item {items.index('') + 1} is empty; "
                                              "expected numbers like 1,0")
    try:
        pattern = [float(x) for x in items]
    except ValueError:
        raise ConfigError("invalid_argument", f"--reward-pattern={text!r}: expected numbers like 1,0") from None
    bad = [x for x in pattern if not (math.isfinite(x) and abs(x) <= FLOAT_EXACT_INT)]
    if bad:
        raise ConfigError("invalid_argument", f"--reward-pattern={text!r}: {bad[0]!r} is not a finite reward within "
                                              "±2**53")
    return pattern


def _check_executor(executor: str) -> None:
    from compactsim.agents import EXECUTOR_KINDS

    if executor not in EXECUTOR_KINDS:
        raise ConfigError("invalid_argument", f"--executor={executor!r}: expected one of {', '.join(EXECUTOR_KINDS)}")


def _usage_error(message: str) -> NoReturn:
    err_console.print(f"[red]usage error[/red]: {rich_escape(message)}", markup=True)
    raise typer.Exit(ExitCode.ERROR)


def _scenario_command(name: str, *, step: int, seed: int | None, out: Path, executor: str, workers: int,
                      json_output: bool, force: bool) -> NoReturn:
    """`--scenario NAME [--step K]`: collect the step, write its files, exit."""
    try:
        _check_executor(executor)
        if workers < 1:
            raise ConfigError("invalid_argument", f"--workers={workers}: expected >= 1")
        scenario = scenario_step(name, step=step, seed=seed)
        claim_output_dir(out, owns=rollout_owns, command="rollout", force=force)
        collected = collect_scenario_step(scenario, step, executor=executor, workers=workers)
        rows = write_outputs(collected, out)
    except CompactsimError as exc:
        raise typer.Exit(report_error(exc, as_json=json_output)) from None
    for note in batch_edits(scenario, step):
        (err_console if json_output else console).print(
            f"note: {note} before the trainer receives it; these files hold the rollouts as the agents emitted them")
    _finish(rows, out, json_output)


def _finish(rows: list[dict[str, Any]], out: Path, json_output: bool) -> NoReturn:
    """Print the summary and exit: 0 when every rollout completed, 1 otherwise."""
    if json_output:
        print_json(rows)
    else:
        console.print(format_summary(rows))
        console.print(f"wrote {len(rows)} rollout(s) to {out}")
    failed = [r for r in rows if r["status"] != "completed"]
    raise typer.Exit(ExitCode.FINDINGS if failed else ExitCode.OK)


def register(app: typer.Typer) -> None:
    app.command("rollout")(rollout_command)


__all__ = [
    "ROLLOUT_OPTIONS",
    "batch_edits",
    "build_specs",
    "collect_scenario_step",
    "format_summary",
    "parse_reward_pattern",
    "pretty_json",
    "register",
    "rollout_command",
    "scenario_step",
    "write_outputs",
]
