"""`compactsim export`: write golden files — Gym payloads plus the oracle's expected plans, rows and metrics.

    compactsim export --out goldens                          # the default suite (whole catalogue)
    compactsim export compaction edge --seed 7 --out goldens  # scenarios or tags
    compactsim export image-compaction-k2-chunked --out g --reference-dump ref
    compactsim verify g ref/rows.jsonl --metrics ref/metrics.jsonl
    compactsim export --check goldens                         # are committed goldens what we export now?

Exits 0 after writing, 2 on a usage error (unknown scenario, a scenario the harness cannot run,
an output directory that holds something else). With ``--check DIR`` nothing is written: the
directory's own scenario definitions are exported again to a temporary directory and compared
file by file (`compactsim.harness.golden.freshness`); exit 0 when every byte agrees, 1 listing
each difference (a file in DIR its manifest does not list, hidden ones included, is one), 2 when DIR is
not valid goldens.
"""

from __future__ import annotations

import shlex
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.markup import escape
from rich.table import Table

from compactsim.harness.commands.common import (
    MAX_SEED,
    ExitCode,
    OptionError,
    console,
    err_console,
    print_json,
    report_error,
)
from compactsim.harness.core.errors import CompactsimError
from compactsim.harness.core.json_input import limits_help
from compactsim.harness.outputs import check_output_dir, ensure_output_dir

DEFAULT_OUT = Path("compactsim-goldens")


def format_export_table(result: Any) -> Table:
    """One line per exported scenario: verdict, steps, files, size, and whether the reference run agreed."""
    table = Table(title=f"goldens in {escape(str(result.directory))}")
    for col, justify in (("scenario", "left"), ("expected", "left"), ("steps", "right"), ("files", "right"),
                         ("KiB", "right"), ("reference run", "left")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for s in result.scenarios:
        expected = s.verdict if s.error_code is None else f"error:{s.error_code}"
        ref = "[green]agrees[/green]" if s.reference_passed else f"[yellow]{s.reference_findings} finding(s)[/yellow]"
        table.add_row(escape(s.name), escape(expected), str(s.steps), str(s.files), f"{s.bytes / 1024:.0f}", ref)
    return table


def export_command(
    scenarios: Annotated[list[str] | None, typer.Argument(help="scenario names, tags or YAML files (default: all)")] = None,
    seed: Annotated[int | None, typer.Option(min=0, max=MAX_SEED, help="seed for every scenario (default: each "
                                                                      "scenario's own)")] = None,
    out: Annotated[Path, typer.Option(help="golden directory to write (a previous export there is replaced)")] = DEFAULT_OUT,
    steps: Annotated[int | None, typer.Option(min=1, help="cap every scenario's optimizer steps")] = None,
    reference_dump: Annotated[Path | None, typer.Option(
        "--reference-dump", help="also write compactsim's own rows.jsonl and metrics.jsonl here (a passing dump)")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="print the manifest as JSON instead of the table")] = False,
    parallel: Annotated[int | None, typer.Option(min=1, help="worker processes running the scenarios (default: 2, "
                                                 "or 1 on a one-CPU machine; the same files either way)")] = None,
    check: Annotated[Path | None, typer.Option(
        "--check", help="write nothing: export this golden directory's own scenarios again and compare every file "
                        "(exit 0 current, 1 stale: each difference listed, 2 not valid goldens)")] = None,
) -> None:
    """Export scenarios as golden files another trainer's CI can check its rows against (`compactsim verify`)."""
    if check is not None:
        _check_command(check, scenarios=scenarios, seed=seed, out=out, steps=steps, reference_dump=reference_dump,
                       json_output=json_output, parallel=parallel)
    from compactsim.harness.golden.export import export_goldens
    from compactsim.harness.local_pool import default_workers
    from compactsim.harness.golden.reader import read_golden
    from compactsim.harness.golden.reference import backend_dump
    from compactsim.harness.golden.rows_dump import format_dump, metrics_line
    from compactsim.harness.commands.selection import select_scenarios

    try:
        selected = select_scenarios(scenarios or [])
        ensure_output_dir(out)  # the goldens are written last: a path that cannot be a folder fails now
        if reference_dump is not None:  # may lie inside --out, which the export clears: checked now, made after
            check_output_dir(reference_dump, option="--reference-dump")
        with err_console.status("exporting", spinner="dots") if not json_output else nullcontext():
            result = export_goldens(selected, out, seed=seed, max_steps=steps, selection=list(scenarios or []),
                                    parallel=parallel or default_workers())
            if reference_dump is not None:
                dump = backend_dump(read_golden(out))
                ensure_output_dir(reference_dump, option="--reference-dump")
                (reference_dump / "rows.jsonl").write_text(format_dump(dump.rows), encoding="utf-8")
                metrics = [metrics_line(name, step, m) for (name, step), m in sorted(result.reference_metrics.items())]
                (reference_dump / "metrics.jsonl").write_text(format_dump(metrics), encoding="utf-8")
    except CompactsimError as exc:
        raise typer.Exit(report_error(exc, as_json=json_output)) from None
    if json_output:
        print_json(result.manifest.to_json())
        raise typer.Exit(ExitCode.OK)
    console.print(format_export_table(result))
    for s in result.scenarios:
        if not s.reference_passed:
            err_console.print(f"[yellow]note[/yellow]: compactsim's reference pipeline disagrees with the oracle on "
                              f"{escape(s.name)} ({s.reference_findings} finding(s)); the goldens are the oracle's — "
                              f"see `compactsim run {escape(s.name)}`")
    total = sum(f.bytes for f in result.manifest.files)
    console.print(f"wrote {len(result.manifest.files)} files ({total / 2**20:.1f} MiB) for {len(result.scenarios)} "
                  f"scenario(s); manifest {escape(str(out / 'manifest.json'))} (format_version "
                  f"{result.manifest.format_version})")
    if reference_dump is not None:
        console.print(f"reference dump: {escape(str(reference_dump / 'rows.jsonl'))}, "
                      f"{escape(str(reference_dump / 'metrics.jsonl'))}")
    raise typer.Exit(ExitCode.OK)


def _check_command(directory: Path, *, scenarios: list[str] | None, seed: int | None, out: Path, steps: int | None,
                   reference_dump: Path | None, json_output: bool, parallel: int | None) -> NoReturn:
    """`export --check DIR`: the manifest says what to export (scenarios, seed, step cap), so no other option may."""
    from compactsim.harness.golden.freshness import check_goldens
    from compactsim.harness.local_pool import default_workers

    given = [name for name, value in (("scenarios", scenarios), ("--seed", seed), ("--steps", steps),
                                      ("--reference-dump", reference_dump),
                                      ("--out", None if out == DEFAULT_OUT else out)) if value not in (None, [])]
    try:
        if given:
            raise OptionError(f"--check takes the scenarios, seed and step cap from the goldens' manifest and writes "
                              f"nothing; drop {', '.join(given)}", option="--check", value=str(directory))
        with err_console.status("exporting again to compare", spinner="dots") if not json_output else nullcontext():
            result = check_goldens(directory, parallel=parallel or default_workers())
    except CompactsimError as exc:
        raise typer.Exit(report_error(exc, as_json=json_output)) from None
    code = ExitCode.OK if result.current else ExitCode.FINDINGS
    if json_output:
        print_json(result.to_json())
        raise typer.Exit(code)
    where = escape(str(directory))
    if result.current:
        console.print(f"goldens in {where} are current: all {result.files} files of {len(result.scenarios)} "
                      f"scenario(s) are what this compactsim exports")
        raise typer.Exit(code)
    table = Table(title=f"goldens in {where} differ from a fresh export")
    for col in ("difference", "file or manifest field", "committed", "exported now"):
        table.add_column(col)
    for d in result.differences:
        table.add_row(d.kind, escape(d.path), escape(_shown(d.committed)), escape(_shown(d.exported)))
    console.print(table)
    console.print(f"{len(result.differences)} difference(s); to export them again: "
                  f"{escape(shlex.join(['compactsim', 'export', *result.export_again]))}")
    if result.unlisted:
        console.print(f"{len(result.unlisted)} extra file(s) not listed in manifest.json (hidden files included); "
                      f"exporting again leaves them in place: remove them yourself")
    raise typer.Exit(code)


def _shown(value: object, width: int = 24) -> str:
    """A digest or a field value, short enough for a table cell."""
    text = "—" if value is None else value if isinstance(value, str) else repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def register(app: typer.Typer) -> None:
    app.command("export", epilog=limits_help())(export_command)


__all__ = ["format_export_table", "register"]
