"""`compactsim gym-check --gym SPEC`: is this NeMo-Gym revision safe for our trainer?"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from compactsim.harness.commands.common import ExitCode, console, print_json, report_error
from compactsim.harness.core.errors import CompactsimError
from compactsim.harness.core.json_input import limits_help
from compactsim.harness.outputs import ensure_output_dir

#: Mirrors `compactsim.harness.gym_check.venv.CACHE_ENV` (not imported here: `compactsim --help` stays fast).
CACHE_ENV = "COMPACTSIM_GYM_CACHE"


def check_payload_files(paths: list[Path]) -> None:
    """Read every payload file (directories: their .json/.jsonl files) within the input limits, before any venv work."""
    from compactsim.harness.core.json_input import InputError, load_json_documents

    for path in paths:
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.suffix in (".json", ".jsonl") and p.is_file())
        elif path.exists():
            files = [path]
        else:
            raise InputError(str(path), None, None, "file not found (a payload .json/.jsonl file or a directory)")
        for f in files:
            load_json_documents(f, what="payload file")


def gym_check_command(
    gym: Annotated[str, typer.Option("--gym", help="nemo-gym==X.Y.Z (PyPI), a .whl file, or a source checkout directory")],
    live: Annotated[bool, typer.Option("--live", help="also run scripted rollouts through the revision's own session")] = False,
    out: Annotated[Path, typer.Option("--out", help="directory for gym-check.json (and live/ payloads)")] = Path("out/gym-check"),
    payloads: Annotated[
        list[Path] | None,
        typer.Option("--payloads", help="our evidence to validate: .json, .jsonl or a directory (repeatable); default: the bundled reference payloads (compactsim.examples_dir())"),
    ] = None,
    scenario: Annotated[
        list[str] | None, typer.Option("--scenario", help="live scenario to run (repeatable); default: all")
    ] = None,
    agent: Annotated[
        bool, typer.Option("--agent/--no-agent", help="with --live: also run the revision's own agent and model server over HTTP")
    ] = True,
    agent_scenario: Annotated[
        list[str] | None, typer.Option("--agent-scenario", help="catalogue scenario tagged 'live' for --agent (repeatable); default: all")
    ] = None,
    emitter: Annotated[
        str | None, typer.Option("--emitter", help="module:attr returning our payload for a LiveScript, for comparison")
    ] = None,
    cache_dir: Annotated[
        Path | None, typer.Option("--cache-dir", help=f"where venvs and wheels are cached (env {CACHE_ENV}; default ~/.cache/compactsim/gym)")
    ] = None,
    offline: Annotated[
        bool, typer.Option("--offline", help="fetch nothing: use the cached wheel and link pydantic from this interpreter")
    ] = False,
    json_output: Annotated[bool, typer.Option("--json", help="print gym-check.json to stdout instead of tables")] = False,
) -> None:
    """Check a Gym revision's evidence models against the contract our planner consumes.

    Exit 0: compatible. Exit 3: drift the planner cannot accept (each one is named), or "contract
    absent" (a NeMo-Gym without the compaction agent). Exit 2: the revision could not be set up.
    """
    from compactsim.harness.gym_check import GymCheckOptions, format_report, run_gym_check, write_report

    opts = GymCheckOptions(
        spec=gym, live=live, cache_dir=cache_dir, offline=offline, payload_paths=tuple(payloads or ()),
        live_scenarios=tuple(scenario or ()), emitter=emitter, agent=agent, agent_scenarios=tuple(agent_scenario or ()),
    )
    try:
        check_payload_files(list(payloads or ()))
        ensure_output_dir(out)  # gym-check.json is written last: a bad --out fails now
        report = run_gym_check(opts, out_dir=out)
    except CompactsimError as exc:
        raise typer.Exit(report_error(exc, as_json=json_output)) from None
    path = write_report(report, out)
    if json_output:
        print_json(report.model_dump(mode="json"))
    else:
        console.print(format_report(report))
        console.print(f"wrote {path}")
    raise typer.Exit(ExitCode(report.exit_code))


def register(app: typer.Typer) -> None:
    app.command("gym-check", epilog=limits_help())(gym_check_command)
