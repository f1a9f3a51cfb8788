"""`compactsim verify`: audit the rows (and metrics) an external trainer dumped against golden files.

    compactsim export image-compaction-k2-chunked --out goldens
    my-trainer --payloads goldens/scenarios --dump-rows rows.jsonl --dump-metrics metrics.jsonl
    compactsim verify goldens rows.jsonl --metrics metrics.jsonl

The audit is `compactsim run`'s, row order independent. Exit 0 when every golden scenario
matches, 1 on findings (each printed with scenario, step, rollout, row, token position, expected
and actual), 2 on a malformed dump (the line and field are named; an empty dump is malformed) or
unusable goldens. `--strict` makes every omitted optional field a finding; `--junit-xml` and
`--markdown` write CI reports. Without a terminal on stderr (CI logs) each golden scenario also gets
one plain line there, as in `compactsim run`: ``[1/2] no-compaction PASS match`` or
``[2/2] k2 FAIL 3 finding(s)``, in the goldens' scenario order (none with `--json`). Metrics the
goldens mark as needing compactsim's own policy
(`policy_metrics`: `token_mult_prob_error`, loss metrics, `grad_norm`) are checked only with
`--require-policy-metrics`: a trainer with another model cannot compute them.
"""

from __future__ import annotations

import time

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from compactsim.harness.commands.ci_outputs import prepare_ci_outputs, write_ci_outputs
from compactsim.harness.commands.common import ExitCode, console, err_console, print_json, report_error
from compactsim.harness.core.errors import CompactsimError, ConfigError
from compactsim.harness.core.json_input import limits_help

DTYPES = ("float64", "float32", "bfloat16")


def _short(value: Any, limit: int = 100) -> str:
    from compactsim.harness.audit.findings import json_value

    text = repr(json_value(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def format_finding(finding: Any, verdict: Any) -> str:
    """`[check] scenario S · step k · rollout R · row T · token p: message — expected E, actual A (dump line L)`."""
    parts = [f"scenario {finding.scenario}"]
    if finding.step is not None:
        parts.append(f"step {finding.step}")
    rollout = verdict.rollout(finding)
    if rollout is not None:
        parts.append(f"rollout {rollout}")
    if finding.row is not None:
        parts.append(f"row {finding.row}")
    if finding.position is not None:
        parts.append(f"{'image' if finding.check in ('row.media', 'row.pixels') else 'token'} {finding.position}")
    lines = verdict.dump_lines(finding)
    where = f" (dump line {', '.join(map(str, lines))})" if lines else ""
    return (f"[{finding.check}] {' · '.join(parts)}: {finding.message} — expected {_short(finding.expected)}, "
            f"actual {_short(finding.actual)}{where}")


def format_verify_line(index: int, total: int, verdict: Any) -> str:
    """``[1/2] no-compaction PASS match`` / ``[2/2] k2 FAIL 3 finding(s)``: one plain line per checked scenario."""
    outcome = "PASS match" if verdict.passed else f"FAIL {len(verdict.findings)} finding(s)"
    return f"[{index}/{total}] {verdict.name} {outcome}"


def format_not_checked(verdict: Any) -> str | None:
    """The optional fields the dump left out for a scenario (they were not checked)."""
    if not verdict.not_checked:
        return None
    fields = ", ".join(f"{k} ({n} {'rollouts' if k == 'rollout_advantage' else 'rows'})"
                       for k, n in verdict.not_checked.items())
    return f"{verdict.name}: not checked (absent from the dump): {fields}"


def format_policy_metrics(verdict: Any) -> str | None:
    """The policy metrics whose checks were dropped for a scenario (no --require-policy-metrics)."""
    if not verdict.policy_metrics_not_checked:
        return None
    return (f"{verdict.name}: not checked (need compactsim's policy; --require-policy-metrics checks them): "
            f"{', '.join(verdict.policy_metrics_not_checked)}")


def verify_command(
    golden_dir: Annotated[Path, typer.Argument(help="a directory written by `compactsim export`")],
    rows_dump: Annotated[Path, typer.Argument(help="the trainer's rows dump (JSON lines; `compactsim schema rows-dump`)")],
    metrics: Annotated[Path | None, typer.Option(help="the trainer's metrics dump (`compactsim schema metrics-dump`)")] = None,
    scenario: Annotated[list[str] | None, typer.Option("--scenario", "-s", help="audit only this golden scenario (repeatable)")] = None,
    dtype: Annotated[str | None, typer.Option(help="float tolerances: float64, float32 or bfloat16 (default: the goldens' trainer precision)")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="print the verdicts as JSON")] = False,
    strict: Annotated[bool, typer.Option("--strict", help="an optional field the dump leaves out is a finding, "
                                                          "not a 'not checked' note")] = False,
    junit_xml: Annotated[Path | None, typer.Option("--junit-xml", help="also write JUnit XML: one test case per "
                                                                       "golden scenario")] = None,
    markdown: Annotated[Path | None, typer.Option("--markdown", help="also write a Markdown summary (appended to "
                                                                      "$GITHUB_STEP_SUMMARY too when that is set)")] = None,
    require_policy_metrics: Annotated[bool, typer.Option(
        "--require-policy-metrics", help="also check the metrics the goldens mark as needing compactsim's own "
                                         "policy (token_mult_prob_error, loss metrics, grad_norm)")] = False,
) -> None:
    """Audit a trainer's rows dump (and metrics) against golden files; exit 0 match, 1 findings, 2 malformed input."""
    from compactsim.harness.audit.checks import Tolerances
    from compactsim.harness.golden.reader import read_golden
    from compactsim.harness.golden.rows_dump import RowsDumpError, read_metrics_dump, read_rows_dump
    from compactsim.harness.golden.verify import verify_dump
    from compactsim.harness.report.junit import cases_from_verify

    started = time.perf_counter()
    try:
        # first: no earlier verify's report survives this one, even its exit 2 (never one of its inputs, though)
        prepare_ci_outputs(junit_xml, markdown, inputs=[(golden_dir, "the golden directory"), (rows_dump, "the rows dump"),
                                                        *([(metrics, "the metrics dump")] if metrics is not None else [])])
        if dtype is not None and dtype not in DTYPES:
            raise ConfigError("invalid_argument", f"--dtype {dtype}: expected one of {', '.join(DTYPES)}")
        dump = read_rows_dump(rows_dump)  # the trainer's input first: its problems do not depend on the goldens
        metrics_dump = read_metrics_dump(metrics) if metrics is not None else None
        golden = read_golden(golden_dir, scenario or None)
        report = verify_dump(golden, dump, metrics_dump,
                             tolerances=Tolerances.for_dtype(dtype) if dtype is not None else None, strict=strict,
                             require_policy_metrics=require_policy_metrics)
        write_ci_outputs(cases_from_verify(report, format_finding), title="compactsim verify", suite="compactsim verify",
                         junit_xml=junit_xml, markdown=markdown, seconds=time.perf_counter() - started)
    except RowsDumpError as exc:
        if json_output:
            print_json(exc.to_json())
            raise typer.Exit(ExitCode.ERROR) from None
        raise typer.Exit(report_error(exc, as_json=False)) from None
    except CompactsimError as exc:
        raise typer.Exit(report_error(exc, as_json=json_output)) from None
    if json_output:
        print_json(report.to_json())
        raise typer.Exit(ExitCode.OK if report.passed else ExitCode.FINDINGS)
    plain = not err_console.is_terminal  # CI logs: one plain line per scenario, as `compactsim run` prints
    for index, verdict in enumerate(report.scenarios, start=1):
        if plain:
            err_console.print(format_verify_line(index, len(report.scenarios), verdict), markup=False,
                              highlight=False, soft_wrap=True)
        for finding in verdict.findings:
            console.print("[red]" + escape(format_finding(finding, verdict)) + "[/red]", soft_wrap=True)
        if verdict.findings:
            console.print(f"  reproduce: {escape(verdict.reproduce)}", soft_wrap=True)
        note = None if strict else format_not_checked(verdict)  # under --strict each omission is a finding
        if note is not None:
            err_console.print(f"[yellow]note[/yellow]: {escape(note)}", soft_wrap=True)
        policy_note = format_policy_metrics(verdict)
        if policy_note is not None:
            err_console.print(f"[yellow]note[/yellow]: {escape(policy_note)}", soft_wrap=True)
    matched = sum(1 for v in report.scenarios if v.passed)
    rows = sum(v.report.rows_audited for v in report.scenarios)
    tokens = sum(v.report.tokens_audited for v in report.scenarios)
    colour = "green" if report.passed else "red"
    console.print(f"[{colour}]{matched}/{len(report.scenarios)} scenarios match the goldens[/{colour}] · "
                  f"{len(report.findings)} finding(s) · {rows} rows, {tokens} tokens audited"
                  + ("" if metrics is not None else " · metrics not checked (no --metrics)"))
    raise typer.Exit(ExitCode.OK if report.passed else ExitCode.FINDINGS)


def register(app: typer.Typer) -> None:
    app.command("verify", epilog=limits_help())(verify_command)


__all__ = ["format_finding", "format_not_checked", "format_policy_metrics", "format_verify_line", "register"]
