"""Replay: re-run a saved scenario run and compare its findings, or diagnose a captured Gym payload.

    compactsim replay out/scenarios/image-compaction-k2-rolling   # re-run, compare with its audit.json
    compactsim replay captured.jsonl                              # plan → materialize → structural audit

A scenario directory written by `compactsim run` holds `scenario.json`, `run.json` (seed,
backend, step cap) and `audit.json`; replaying runs it again and reports whether the findings
are the same. A payload file (one result, a JSON list, or JSON lines) goes through the backend's
plan and materialize with full diagnostics: each rollout's traces or its contract error, each
row, and the audit's structural checks (padding, divisibility) that need no oracle.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compactsim.harness.audit import Finding
from compactsim.harness.audit.observed import BACKEND_ERROR
from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.core.errors import CompactsimError, ContractError
from compactsim.harness.core.json_input import InputError, load_json
from compactsim.harness.core.trace_plan import TracePlan
from compactsim.harness.runner import ScenarioRun, load_saved_run, run_scenario


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """A re-run of a saved scenario run."""

    directory: Path
    run: ScenarioRun
    saved: tuple[Finding, ...]

    @property
    def same_findings(self) -> bool:
        return [f.to_json() for f in self.run.record.findings] == [f.to_json() for f in self.saved]


def replay_directory(directory: Path) -> ReplayResult:
    """Re-run the scenario saved in `directory` with its saved seed, backend and step cap."""
    scenario, options, saved = load_saved_run(directory)
    findings = _saved_findings(directory / "audit.json", (saved or {}).get("findings", []))
    run = run_scenario(scenario, options)
    return ReplayResult(directory=directory, run=run, saved=findings)


def _saved_findings(source: Path, data: Sequence[Any]) -> tuple[Finding, ...]:
    """The findings of a saved ``audit.json``; one that is not a finding object is an `InputError` naming it.

    Checked before the re-run, so an edited audit costs no run and never surfaces as a traceback.
    """
    out = []
    for k, item in enumerate(data):
        try:
            finding = Finding.from_json(item)
        except (KeyError, TypeError, ValueError) as exc:  # ValueError: an unknown check name
            raise InputError(str(source), None, f"findings[{k}]", f"not a saved finding ({type(exc).__name__}: "
                                                                   f"{exc})") from None
        for name in ("step", "position"):  # sorted and compared as ints when the findings are matched
            value = getattr(finding, name)
            if value is not None and type(value) is not int:
                raise InputError(str(source), None, f"findings[{k}].{name}", f"{value!r}: expected an integer or null")
        if not isinstance(finding.message, str):
            raise InputError(str(source), None, f"findings[{k}].message", f"{finding.message!r}: expected a string")
        out.append(finding)
    return tuple(out)


def replay_targets(path: Path) -> list[Path]:
    """Scenario directories to replay: `path` itself, or every failed scenario of a run directory.

    ``summary.json`` is read under the input limits and its ``failed`` list must hold scenario
    names (which can never leave ``scenarios/``); anything else is an `InputError` naming the field.
    """
    from compactsim.scenarios.model import NAME_PATTERN

    if (path / "run.json").is_file():
        return [path]
    summary = path / "summary.json"
    if not summary.is_file():
        return []
    data = load_json(summary, what="run summary")
    failed = data.get("failed", []) if isinstance(data, dict) else None
    if not isinstance(failed, list):
        raise InputError(str(summary), None, "failed", "expected an object whose failed is a list of scenario names")
    for k, name in enumerate(failed):
        if not isinstance(name, str) or not NAME_PATTERN.match(name):
            raise InputError(str(summary), None, f"failed[{k}]", f"{name!r} is not a scenario name (lowercase "
                                                                  "letters, digits and dashes)")
    return [path / "scenarios" / name for name in failed]


@dataclass(frozen=True, slots=True)
class RolloutDiagnosis:
    """One rollout of a payload: its plan (trace turn ids, start reasons) or the contract error it raised."""

    index: int
    rollout_id: str | None
    traces: tuple[Mapping[str, Any], ...] = ()
    error: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class PayloadDiagnosis:
    """Everything `compactsim replay FILE` reports about a captured payload."""

    rollouts: tuple[RolloutDiagnosis, ...]
    rows: tuple[Mapping[str, Any], ...] = ()
    metrics: Mapping[str, Any] = field(default_factory=dict)
    batch_error: Mapping[str, Any] | None = None
    findings: tuple[Finding, ...] = ()

    @property
    def ok(self) -> bool:
        return self.batch_error is None and all(r.error is None for r in self.rollouts) and not self.findings


def _error_json(exc: CompactsimError) -> dict[str, Any]:
    if isinstance(exc, ContractError):
        return {"code": exc.code, "rollout_id": exc.rollout_id, "turn_id": exc.turn_id, "detail": exc.detail}
    return {"code": getattr(exc, "code", type(exc).__name__), "rollout_id": None, "turn_id": None, "detail": str(exc)}


def _backend_error_json(method: str, exc: Exception) -> dict[str, Any]:
    return {"code": BACKEND_ERROR, "rollout_id": None, "turn_id": None,
            "detail": f"the backend's {method} raised {type(exc).__name__}: {exc}"}


def diagnose_payload(results: Sequence[Mapping[str, Any]], *, backend_spec: str, group_size: int | None = None,
                     dp_size: int = 1, micro_batch_size: int = 1) -> PayloadDiagnosis:
    """Plan every result with the backend, then materialize them as one batch, collecting every diagnostic."""
    from compactsim.harness.audit.checks import Reporter, check_padding
    from compactsim.harness.audit.observed import ObservedStep, observed_from_artifact
    from compactsim.harness.core.artifacts import artifact_from_batch
    from compactsim.harness.outputs import stops_the_run
    from compactsim.harness.pipeline.backend import load_backend, protocol_return
    from compactsim.harness.pipeline.train_config import parse_trainer_config

    backend = load_backend(backend_spec)
    diagnoses: list[RolloutDiagnosis] = []
    plans = []
    for k, result in enumerate(results):
        try:
            plan = protocol_return("plan", backend.plan(result), TracePlan)
        except CompactsimError as exc:
            err = _error_json(exc)
            diagnoses.append(RolloutDiagnosis(k, err.get("rollout_id"), error=err))
            continue
        except BaseException as exc:  # noqa: BLE001 - the backend under test broke (sys.exit and its own BaseException
            if stops_the_run(exc):  # too): its diagnosis, not a traceback; only Ctrl-C or a signal stops the replay
                raise
            diagnoses.append(RolloutDiagnosis(k, None, error=_backend_error_json("plan", exc)))
            continue
        plans.append(plan)
        diagnoses.append(RolloutDiagnosis(k, plan.evidence.rollout_id, traces=tuple(t.to_json() for t in plan.traces)))
    if len(plans) != len(results):
        return PayloadDiagnosis(rollouts=tuple(diagnoses))
    sizes: dict[str, int] = {}
    for p in plans:
        sizes[p.evidence.group_key] = sizes.get(p.evidence.group_key, 0) + 1
    n = group_size or max(sizes.values(), default=1)
    cfg = parse_trainer_config({"grpo": {"num_generations_per_prompt": n, "num_prompts_per_step": max(len(sizes), 1)},
                                "policy": {"dp_size": dp_size, "train_micro_batch_size": micro_batch_size,
                                           "train_global_batch_size": max(len(plans), 1)}})
    try:
        batch = protocol_return("materialize", backend.materialize(plans, cfg), TraceBatch)
    except CompactsimError as exc:
        return PayloadDiagnosis(rollouts=tuple(diagnoses), batch_error=_error_json(exc))
    except BaseException as exc:  # noqa: BLE001 - as for plan
        if stops_the_run(exc):
            raise
        return PayloadDiagnosis(rollouts=tuple(diagnoses), batch_error=_backend_error_json("materialize", exc))
    import torch

    zeros = torch.zeros(batch.row_input_ids.shape, dtype=torch.float64)
    artifact = artifact_from_batch(batch, step=0, trained_policy_version=0, prev_logprobs=zeros, reference_logprobs=None,
                                   routes_used=batch.routed_experts, metrics=batch.metrics(),
                                   optimizer_steps=0, scheduler_increments=0)  # nothing trained: only rows are audited
    step: ObservedStep = observed_from_artifact(artifact)
    findings = check_padding(Reporter("payload", 0, f"compactsim replay <file> --backend {backend_spec}"), step, None)
    rows = tuple(
        {"row": r.row_index, "parent": r.parent_index, "physical_trace_id": r.physical_trace_id, "length": r.length,
         "trained_tokens": int((r.token_mask != 0).sum()), "media": list(r.media_ids),
         "sentinels": list(r.declared_sentinel_positions)}
        for r in step.rows
    )
    return PayloadDiagnosis(rollouts=tuple(diagnoses), rows=rows, metrics=dict(step.metrics), findings=tuple(findings))


__all__ = ["PayloadDiagnosis", "ReplayResult", "RolloutDiagnosis", "diagnose_payload", "replay_directory", "replay_targets"]
