"""`compactsim run | list | show | replay | shrink`: run scenario suites and audit them, inspect, reproduce, minimise.

    compactsim run                                  # the default suite: every catalogue scenario
    compactsim run compaction --seed 7 --out runs/s7 --executor ray
    compactsim run compaction --ray-address 127.0.0.1:6379   # an existing cluster (`ray start --head --port 6379`)
    compactsim run --wandb-project my-trainer --wandb-group nightly --wandb-tag ci    # offline W&B runs under OUT/wandb
    compactsim run no-compaction --backend tests.quality.broadcast_first_advantage:Backend
    compactsim list ; compactsim show image-compaction-k2-rolling    # = compactsim scenarios list / show
    compactsim replay runs/s7/scenarios/image-compaction-k2-rolling
    compactsim shrink my-scenario.yaml --backend mypkg:Backend --out shrunk/

`run` exits 0 only when every scenario meets its expected verdict with no audit finding, 1 when
any scenario fails, 2 on a usage error or bad input (unknown scenario, bad option, a scenario file
that is missing, undecodable or over the input limits). `--junit-xml` / `--markdown` write CI
reports; in a log without a terminal each finished scenario prints one line.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from compactsim.harness.commands.ci_outputs import format_progress_line, prepare_ci_outputs, write_ci_outputs
from compactsim.harness.commands.common import (
    MAX_SEED,
    ExitCode,
    console,
    err_console,
    load_results,
    print_json,
    report_error,
    use_cwd_imports,
)
from compactsim.harness.commands.selection import select_scenarios
from compactsim.harness.core.contract import INT32_LIMIT
from compactsim.harness.core.errors import CompactsimError, ConfigError
from compactsim.harness.core.json_input import limits_help, load_json
from compactsim.harness.local_pool import default_workers
from compactsim.harness.outputs import ensure_output_dir, finish_output_dir, prepare_output_dir, release_output_dir

DEFAULT_OUT = Path("compactsim-run")


def check_gym_check_report(path: Path) -> None:
    """`--gym-check FILE` must be a `gym-check.json` (`compactsim gym-check` writes one); checked before any scenario runs.

    Any JSON file passes the input limits; without this, a file of another kind (a Gym result, say)
    is found out only when the summary is written, after the whole suite ran, as a ValidationError.
    """
    from pydantic import ValidationError

    from compactsim.harness.gym_check.report import GymCheckReport

    data = load_json(path, what="gym-check.json")  # within the input limits first
    try:
        GymCheckReport.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        first = errors[0]
        where = ".".join(map(str, first["loc"])) or "$"
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ConfigError("invalid_argument", f"--gym-check {path}: not a gym-check.json report (`compactsim "
                                              f"gym-check` writes one): field {where}: {first['msg']}{more}") from None


def format_results_table(records: list[Any]) -> Table:
    """The final table: scenario, verdict, steps, rows, tokens, seconds, findings."""
    table = Table(title="compactsim run", show_lines=False)
    for col, justify in (("scenario", "left"), ("verdict", "left"), ("expected", "left"), ("steps", "right"),
                         ("rows", "right"), ("tokens", "right"), ("seconds", "right"), ("findings", "right")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in records:
        verdict = "[green]pass[/green]" if r.passed else "[red bold]FAIL[/red bold]"
        table.add_row(escape(r.name), verdict, escape(r.expected), str(r.steps), str(r.rows), str(r.tokens),
                      f"{r.seconds:.2f}", str(len(r.findings)))
    return table


def format_failures(records: list[Any], *, per_scenario: int = 3) -> list[str]:
    """For each failing scenario: its first findings and its reproduction command."""
    lines: list[str] = []
    for r in records:
        if r.passed:
            continue
        lines.append(f"[red bold]FAIL[/red bold] {escape(r.name)}: {escape(r.outcome)}")
        for f in r.findings[:per_scenario]:
            lines.append("  " + escape(str(f).splitlines()[0]))
        if len(r.findings) > per_scenario:
            lines.append(f"  … {len(r.findings) - per_scenario} more in summary.json")
        lines.append(f"  reproduce: {escape(r.reproduce)}")
    return lines


def _run_inputs(selectors: list[str], gym_check: Path | None, out: Path) -> list[tuple[Path, str]]:
    """What a report path must never be: a scenario file, the catalogue or the gym-check report this run reads, or
    an entry of its output folder (cleared and rewritten by the run). Checked before any earlier report is cleared."""
    from compactsim.harness.outputs import OWNED
    from compactsim.scenarios.catalogue import CATALOGUE_DIR

    inputs = [(Path(s), "the scenario file") for s in selectors if Path(s).is_file()]
    inputs.append((CATALOGUE_DIR, "the scenario catalogue"))  # what a name selects is read from there
    if gym_check is not None:
        inputs.append((gym_check, "the gym-check report"))
    return inputs + [(out / name, "the output folder's own entry") for name in OWNED]


def run_command(
    scenarios: Annotated[list[str] | None, typer.Argument(help="scenario names, tags or YAML files (default: all)")] = None,
    seed: Annotated[int | None, typer.Option(min=0, max=MAX_SEED, help="seed for every scenario (default: each "
                                                                      "scenario's own)")] = None,
    out: Annotated[Path, typer.Option(help="output directory: summary.json, report.html, per-scenario artifacts")] = DEFAULT_OUT,
    force: Annotated[bool, typer.Option("--force", help="write into a non-empty --out that is not a compactsim output "
                                                        "folder (only compactsim's own entries are replaced)")] = False,
    executor: Annotated[str | None, typer.Option(help="local (in this process; the default) or ray (one task per "
                                                     "scenario; implied by --ray-address)")] = None,
    ray_address: Annotated[str | None, typer.Option("--ray-address", help="HOST:PORT of an existing Ray cluster's GCS "
                                                    "(`ray start --head --port PORT`) to fan scenarios out over; implies "
                                                    "--executor ray; exit 2 when nothing answers there within 30 s")] = None,
    parallel: Annotated[int | None, typer.Option(min=1, help="worker processes of the local executor (default: "
                                                 "2, or 1 on a one-CPU machine; 1 runs in this process) or CPUs "
                                                 "of the local Ray instance (default 2)")] = None,
    device: Annotated[str, typer.Option(help="cpu, cuda or auto")] = "cpu",
    backend: Annotated[str | None, typer.Option(help="backend under test as module:attr")] = None,
    steps: Annotated[int | None, typer.Option(min=1, help="cap every scenario's optimizer steps (smoke budget)")] = None,
    precision: Annotated[str | None, typer.Option(help="train every scenario in float32 or float64 (the trainer's "
                                                  "policy.precision and logprob_dtype, the policy-mode server's "
                                                  "dtype; audit tolerances follow; default: each scenario's own)")] = None,
    server: Annotated[str, typer.Option(help="inprocess (ASGI, no port) or http (uvicorn on 127.0.0.1)")] = "inprocess",
    wandb: Annotated[bool, typer.Option("--wandb", help="log each scenario to Weights & Biases, offline, under OUT/wandb")] = False,
    wandb_project: Annotated[str | None, typer.Option("--wandb-project", help="W&B project (default compactsim); "
                                                      "implies --wandb")] = None,
    wandb_entity: Annotated[str | None, typer.Option("--wandb-entity", help="W&B entity (team or user); implies --wandb")] = None,
    wandb_group: Annotated[str | None, typer.Option("--wandb-group", help="W&B group of this suite's runs; implies --wandb")] = None,
    wandb_tag: Annotated[list[str] | None, typer.Option("--wandb-tag", help="a W&B tag for every run (repeat it); "
                                                        "implies --wandb")] = None,
    gym_check: Annotated[Path | None, typer.Option("--gym-check", help="a gym-check.json whose revision to record")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="print summary.json to stdout instead of the table")] = False,
    junit_xml: Annotated[Path | None, typer.Option("--junit-xml", help="also write JUnit XML: one test case per scenario")] = None,
    markdown: Annotated[Path | None, typer.Option("--markdown", help="also write a Markdown summary (appended to "
                                                                      "$GITHUB_STEP_SUMMARY too when that is set)")] = None,
) -> None:
    """Run scenarios through the backend, audit every step against the oracle, and write the report."""
    from compactsim.harness.report.junit import cases_from_records
    from compactsim.harness.report.summary import format_summary_json
    from compactsim.harness.runner import (DEFAULT_BACKEND, PRECISIONS, RunOptions, gym_record, run_suite, suite_record,
                                           write_outputs)

    use_cwd_imports()
    wandb_settings = None
    try:
        # first: no earlier run's report survives this one, even its exit 2 (never an input or an output entry)
        prepare_ci_outputs(junit_xml, markdown, inputs=_run_inputs(scenarios or [], gym_check, out))
        if executor not in (None, "local", "ray"):
            raise ConfigError("invalid_argument", f"--executor {executor}: expected local or ray")
        if ray_address is not None:
            if executor == "local":
                raise ConfigError("invalid_argument", f"--ray-address {ray_address} needs the Ray executor: drop "
                                                      "--executor local (--ray-address implies --executor ray)")
            from compactsim.agents.collect.ray_local import check_ray_address

            check_ray_address(ray_address)  # fail fast, before the output folder is touched
            executor = "ray"
        executor = executor or "local"
        if parallel is None:
            parallel = default_workers() if executor == "local" else 2
        # each W&B option implies --wandb, even empty: an unset CI variable is refused, never a run that logs nothing
        if wandb or any(v is not None for v in (wandb_project, wandb_entity, wandb_group, wandb_tag)):
            from compactsim.harness.report.wandb_log import DEFAULT_PROJECT, WandbSettings

            wandb = True
            wandb_settings = WandbSettings(project=DEFAULT_PROJECT if wandb_project is None else wandb_project,
                                           entity=wandb_entity, group=wandb_group, tags=tuple(wandb_tag or ()),
                                           directory=str(out / "wandb"))
        if server not in ("inprocess", "http"):
            raise ConfigError("invalid_argument", f"--server {server}: expected inprocess or http")
        if precision is not None and precision not in PRECISIONS:
            raise ConfigError("invalid_argument", f"--precision {precision}: expected one of {', '.join(PRECISIONS)} "
                                                  "(bfloat16: only where a scenario sets it itself)")
        if device not in ("cpu", "cuda", "auto"):
            raise ConfigError("invalid_argument", f"--device {device}: expected cpu, cuda or auto")
        if device != "cpu":
            from compactsim.harness.train_run import resolve_device

            resolve_device(device)  # `train`'s check: --device cuda without a GPU is bad input, not a finding
        if backend:
            from compactsim.harness.pipeline.backend import load_backend

            load_backend(backend)  # fail fast, before any scenario runs
        selected = select_scenarios(scenarios or [])
        if gym_check is not None:
            check_gym_check_report(gym_check)  # a valid gym-check.json before anything runs
        prepare_output_dir(out, force=force)  # outputs: clear the old run's, mark this one running
    except CompactsimError as exc:
        raise typer.Exit(report_error(exc, as_json=json_output)) from None
    try:  # the folder's lock (prepare_output_dir) is held until the run ends, however it ends
        options = RunOptions(seed=seed, backend=backend or DEFAULT_BACKEND, device=device, max_steps=steps,  # type: ignore[arg-type]
                             server=server, wandb=wandb, wandb_dir=str(out / "wandb"), precision=precision)  # type: ignore[arg-type]
        started = time.perf_counter()
        plain = not err_console.is_terminal  # CI logs: one line per scenario instead of redrawn bars
        finished = 0
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=err_console, transient=True, disable=json_output or plain) as progress:
            overall = progress.add_task("scenarios", total=len(selected))
            tasks: dict[str, Any] = {}

            def on_event(ev: Any) -> None:
                nonlocal finished
                if plain:
                    if ev.done and not json_output:
                        finished += 1
                        rec = ev.record
                        line = format_progress_line(finished, len(selected), ev.scenario,
                                                    bool(rec is not None and rec.passed),
                                                    float(rec.seconds) if rec is not None else 0.0)
                        err_console.print(line, markup=False, highlight=False, soft_wrap=True)
                    return
                if ev.scenario not in tasks:
                    tasks[ev.scenario] = progress.add_task(f"  {ev.scenario}", total=max(ev.total_steps, 1))
                progress.update(tasks[ev.scenario], completed=ev.step)
                if ev.done:
                    progress.remove_task(tasks.pop(ev.scenario))
                    progress.advance(overall)

            try:
                runs = run_suite(selected, options, executor=executor, ray_address=ray_address, parallel=parallel,  # type: ignore[arg-type]
                                 on_event=on_event, wandb=wandb_settings)
            except CompactsimError as exc:  # e.g. the Ray cluster went away between the check and the connection
                raise typer.Exit(report_error(exc, as_json=json_output)) from None
        total = time.perf_counter() - started
        suite = suite_record(runs, options, [s.name for s in selected], gym=gym_record(runs, gym_check))
        paths = write_outputs(out, runs, suite, total_seconds=total, executor=executor)
        finish_output_dir(out, passed=suite.passed)  # outputs: run-state.json says complete
        records = [r.record for r in runs]
        try:
            write_ci_outputs(cases_from_records(records), title="compactsim run", suite="compactsim run",
                             junit_xml=junit_xml, markdown=markdown, seconds=total)
        except CompactsimError as exc:
            raise typer.Exit(report_error(exc, as_json=json_output)) from None
        if json_output:
            sys.stdout.write(format_summary_json(suite))  # the bytes of summary.json itself (sorted keys)
            sys.stdout.flush()
        else:
            console.print(format_results_table(records))
            for line in format_failures(records):
                console.print(line)
            passed = sum(1 for r in records if r.passed)
            colour = "green" if passed == len(records) else "red"
            console.print(f"[{colour}]{passed}/{len(records)} scenarios met their expected verdict[/{colour}] in "
                          f"{total:.1f}s · summary {paths['summary']} · report {paths['report']}")
        invalid = [r.invalid_scenario for r in runs if r.invalid_scenario is not None]
        for reason in invalid:  # bad input found only once its rollouts existed: the outputs are written, exit 2
            report_error(ConfigError("invalid_config", reason), as_json=False)
        raise typer.Exit(ExitCode.ERROR if invalid else ExitCode.OK if suite.passed else ExitCode.FINDINGS)
    finally:
        release_output_dir(out)


def replay_command(
    target: Annotated[Path, typer.Argument(help="a scenario run directory, a run output directory, or a Gym payload file")],
    backend: Annotated[str | None, typer.Option(help="payload files: backend as module:attr")] = None,
    group_size: Annotated[int | None, typer.Option(min=1, max=INT32_LIMIT - 1,
                                                   help="payload files: rollouts per group (default: inferred)")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
) -> None:
    """Re-run a saved failure (same findings?) or push a captured payload through plan → materialize → audit."""
    from compactsim.harness.replay import diagnose_payload, replay_directory, replay_targets
    from compactsim.harness.runner import DEFAULT_BACKEND

    use_cwd_imports()
    try:
        if target.is_dir():
            dirs = replay_targets(target)
            if not dirs:
                raise ConfigError("invalid_argument", f"{target}: no run.json here and no failed scenario in a summary.json")
            results = [replay_directory(d) for d in dirs]
        else:
            payload = load_results(target)
            diag = diagnose_payload(payload, backend_spec=backend or DEFAULT_BACKEND, group_size=group_size)
    except CompactsimError as exc:
        raise typer.Exit(report_error(exc, as_json=json_output)) from None
    if target.is_dir():
        failed = any(not r.run.record.passed for r in results)
        if json_output:
            print_json([{"directory": str(r.directory), "same_findings": r.same_findings,
                         "findings": [f.to_json() for f in r.run.record.findings]} for r in results])
        else:
            for r in results:
                rec = r.run.record
                same = "[green]same findings as saved[/green]" if r.same_findings else "[yellow]findings differ from saved[/yellow]"
                console.print(f"{escape(rec.name)}: {'pass' if rec.passed else 'FAIL'}, {len(rec.findings)} finding(s); {same}")
                for f in rec.findings:
                    console.print("  " + escape(str(f)))
        raise typer.Exit(ExitCode.FINDINGS if failed else ExitCode.OK)
    if json_output:
        print_json({"ok": diag.ok, "rollouts": [{"index": d.index, "rollout_id": d.rollout_id, "traces": list(d.traces),
                                                 "error": d.error} for d in diag.rollouts],
                    "batch_error": diag.batch_error, "rows": list(diag.rows), "findings": [f.to_json() for f in diag.findings]})
    else:
        for d in diag.rollouts:
            if d.error is not None:
                e = d.error
                console.print(f"[red]rollout {d.index} ({escape(str(d.rollout_id))}): {escape(str(e['code']))}[/red] "
                              f"turn {e['turn_id']}: {escape(str(e['detail']))}")
            else:
                traces = "; ".join(f"{t['trace_id']} turns {t['turn_ids']} ({t['start_reason']})" for t in d.traces)
                console.print(f"rollout {d.index} ({escape(str(d.rollout_id))}): {len(d.traces)} trace(s): {escape(traces)}")
        if diag.batch_error is not None:
            console.print(f"[red]batch: {escape(str(diag.batch_error['code']))}: {escape(str(diag.batch_error['detail']))}[/red]")
        if diag.rows:
            table = Table(title=f"{len(diag.rows)} rows")
            for col in ("row", "parent", "physical trace", "length", "trained", "media", "sentinels"):
                table.add_column(col, overflow="fold")
            for row in diag.rows:
                table.add_row(str(row["row"]), str(row["parent"]), escape(str(row["physical_trace_id"] or "(padding)")),
                              str(row["length"]), str(row["trained_tokens"]), str(len(row["media"])),
                              ",".join(map(str, row["sentinels"])) or "-")
            console.print(table)
        for f in diag.findings:
            console.print("[red]" + escape(str(f)) + "[/red]")
    raise typer.Exit(ExitCode.OK if diag.ok else ExitCode.ERROR)


def shrink_command(
    scenario: Annotated[str, typer.Argument(help="a failing scenario: catalogue name or YAML file")],
    seed: Annotated[int | None, typer.Option(min=0, max=MAX_SEED, help="seed (default: the scenario's own)")] = None,
    backend: Annotated[str | None, typer.Option(help="backend under test as module:attr")] = None,
    out: Annotated[Path, typer.Option(help="directory for the new catalogue entry file")] = Path("shrunk"),
    name: Annotated[str | None, typer.Option(help="name of the new scenario (default: <name>-shrunk)")] = None,
    max_examples: Annotated[int, typer.Option(min=1, help="Hypothesis examples to try")] = 60,
    json_output: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
) -> None:
    """Shrink a failing scenario to the fewest model calls that still fail, and write it as a catalogue entry."""
    from compactsim.harness.runner import DEFAULT_BACKEND, RunOptions
    from compactsim.harness.shrink import shrink, shrunk_entry
    from compactsim.scenarios.catalogue import dump_scenario

    use_cwd_imports()
    made = not out.exists()
    try:
        original = select_scenarios([scenario])[0]
        if seed is not None:
            original = original.with_seed(seed)
        ensure_output_dir(out)  # a bad --out fails now, not after the search
        if backend:
            from compactsim.harness.pipeline.backend import load_backend

            load_backend(backend)  # an unloadable backend is bad input, not "passes the audit"
        if name is not None:
            from compactsim.scenarios.model import check_name

            try:
                check_name(name)  # before the search, not after it
            except ValueError as exc:
                raise ConfigError("invalid_argument", f"--{exc}") from None
        result = shrink(original, RunOptions(backend=backend or DEFAULT_BACKEND), max_examples=max_examples)
        entry = shrunk_entry(result, name=name)
    except CompactsimError as exc:
        if made and out.is_dir() and not any(out.iterdir()):
            out.rmdir()  # made for the entry that never came (e.g. nothing to shrink): leave no empty folder
        raise typer.Exit(report_error(exc, as_json=json_output)) from None
    path = out / f"{entry.name}.yaml"
    path.write_text(dump_scenario(entry), encoding="utf-8")
    info = {"scenario": original.name, "seed": original.seed, "calls_before": result.calls_before,
            "calls_after": result.calls_after, "checks": list(result.checks), "runs": result.runs, "file": str(path),
            "name": entry.name}
    if json_output:
        print_json(info)
    else:
        console.print(f"shrunk {escape(original.name)} (seed {original.seed}) from {result.calls_before} to "
                      f"{result.calls_after} model calls in {result.runs} runs; still fails "
                      f"{escape(', '.join(result.checks))}")
        console.print(f"wrote {escape(str(path))} (scenario {escape(entry.name)})")
    raise typer.Exit(ExitCode.OK)


def register(app: typer.Typer) -> None:
    from compactsim.harness.commands import scenarios as catalogue_commands

    app.command("run", epilog=limits_help())(run_command)
    # `compactsim list` / `compactsim show` are `compactsim scenarios list` / `show` (one implementation)
    app.command("list")(catalogue_commands.list_command)
    app.command("show")(catalogue_commands.show_command)
    app.command("replay", epilog=limits_help())(replay_command)
    app.command("shrink", epilog=limits_help())(shrink_command)


__all__ = ["format_failures", "format_results_table", "register"]
