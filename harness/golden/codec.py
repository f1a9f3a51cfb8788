"""Golden-file encoding of the oracle's expectation: `ScenarioExpectation` → JSON documents and row lines, and back.

An expectation is split in two for a reader's sake: ``expectation.json`` (verdict, trainer
settings, per step the plans, errors, payload files and metrics) and one JSON-lines file of rows
per step, in the rows-dump layout (one row per line, real rows in the oracle's canonical order,
then padding rows), so a person can put a trainer's dump line beside the row it should equal.
Decoding gives back an equal `ScenarioExpectation`, route tensors included (`routed_experts`,
the rows-dump field: null when the batch recorded no routes).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from compactsim.harness.core.errors import ConfigError
from compactsim.harness.core.expectations import (
    ExpectedError,
    ExpectedRollout,
    ExpectedRow,
    ExpectedStep,
    ExpectedTrace,
    MetricExpectation,
    ScenarioExpectation,
)
from compactsim.harness.golden.routes_field import parse_routes, routes_json


@dataclass(frozen=True, slots=True)
class TrainerSettings:
    """What an external trainer must be configured with to reproduce a scenario's rows (plain values)."""

    num_generations_per_prompt: int | None
    leave_one_out: bool
    normalize: bool
    clip_low: float | None
    clip_high: float | None
    dp_size: int
    micro_batch_size: int
    async_mode: bool
    importance_sampling_correction: bool
    #: float64 / float32 / bfloat16: decides the audit's float tolerances.
    precision: str
    #: The full trainer configuration (NeMo-RL key names), for reference.
    config: Mapping[str, Any]
    #: Router replay on: every real row must carry its routes (no routes recorded: the step is refused).
    router_replay: bool = False
    #: Rows longer than this are refused (`sequence_too_long`).
    max_total_sequence_length: int = 4096
    #: The padded row length S is the longest row rounded up to this (enters `advantages/sum`).
    make_sequence_length_divisible_by: int = 1

    def to_json(self) -> dict[str, Any]:
        return {
            "num_generations_per_prompt": self.num_generations_per_prompt,
            "leave_one_out": self.leave_one_out,
            "normalize": self.normalize,
            "clip_low": self.clip_low,
            "clip_high": self.clip_high,
            "dp_size": self.dp_size,
            "micro_batch_size": self.micro_batch_size,
            "async_mode": self.async_mode,
            "importance_sampling_correction": self.importance_sampling_correction,
            "precision": self.precision,
            "config": dict(self.config),
            "router_replay": self.router_replay,
            "max_total_sequence_length": self.max_total_sequence_length,
            "make_sequence_length_divisible_by": self.make_sequence_length_divisible_by,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TrainerSettings:
        return cls(**{f.name: data[f.name] for f in fields(cls)})


@dataclass(frozen=True, slots=True)
class PayloadGroup:
    """One payload file: the results of one GRPO group of one step, in the order the trainer receives them."""

    group: int
    file: str
    rollouts: int

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "file": self.file, "rollouts": self.rollouts}


def rows_file(step: int) -> str:
    """Path of a step's expected rows, relative to the scenario's directory."""
    return f"rows/step-{step:04d}.jsonl"


def payload_file(step: int, group: int) -> str:
    """Path of one group's payloads of one step, relative to the scenario's directory."""
    return f"payloads/step-{step:04d}/group-{group}.jsonl"


def padding_rows(step: ExpectedStep, trainer: TrainerSettings) -> int:
    """Padding rows a correct trainer appends: up to a multiple of dp_size × micro_batch_size."""
    if not step.rows:
        return 0
    multiple = trainer.dp_size * trainer.micro_batch_size
    return (-len(step.rows)) % multiple


def _trains(step: ExpectedStep) -> bool:
    return step.error is None and step.batch_error is None


# ------------------------------------------------------------------------------------------ rows


def row_line(scenario: str, step: int, row: ExpectedRow, parent_index: int) -> dict[str, Any]:
    """One expected real row in the rows-dump layout (+ repaired route positions)."""
    n = len(row.input_ids)
    logprobs = [0.0] * n
    advantages = [0.0] * n
    for p, lp in zip(row.trainable_positions, row.generation_logprobs, strict=True):
        logprobs[p] = float(lp)
        advantages[p] = float(row.advantage)
    return {
        "scenario": scenario,
        "step": step,
        "physical_trace_id": row.physical_trace_id,
        "logical_rollout_id": row.logical_rollout_id,
        "parent_index": parent_index,
        "trace_index": row.trace_index,
        "input_ids": list(row.input_ids),
        "mask_spans": [list(s) for s in row.mask_spans],
        "generation_logprobs": logprobs,
        "advantages": advantages,
        "rollout_advantage": float(row.advantage),
        "sample_mask": float(row.sample_mask),
        "generation_policy_version": row.generation_policy_version,
        "media_ids": list(row.media_ids),
        "pixel_digests": list(row.pixel_digests),
        "routed_experts_sentinel_positions": list(row.sentinel_positions),
        "routed_experts_repaired_positions": list(row.repaired_positions),
        "routed_experts": None if row.routes is None else routes_json(row.routes),
    }


def padding_line(scenario: str, step: int) -> dict[str, Any]:
    """One expected padding row: no tokens, no weight."""
    return {
        "scenario": scenario, "step": step, "physical_trace_id": None, "logical_rollout_id": None,
        "parent_index": -1, "trace_index": -1, "input_ids": [], "mask_spans": [], "generation_logprobs": [],
        "advantages": [], "rollout_advantage": 0.0, "sample_mask": 0.0, "generation_policy_version": None,
        "media_ids": [], "pixel_digests": [], "routed_experts_sentinel_positions": [],
        "routed_experts_repaired_positions": [], "routed_experts": None,
    }


def step_row_lines(scenario: str, step: ExpectedStep, trainer: TrainerSettings) -> list[dict[str, Any]]:
    """Every row of a training step: real rows (parent index = position of the rollout in `step.rollouts`), then padding."""
    parent = {r.rollout_id: k for k, r in enumerate(step.rollouts)}
    lines = [row_line(scenario, step.step, row, parent[row.logical_rollout_id]) for row in step.rows]
    lines += [padding_line(scenario, step.step) for _ in range(padding_rows(step, trainer))]
    return lines


def row_from_line(line: Mapping[str, Any]) -> ExpectedRow:
    """The `ExpectedRow` a golden row line stands for (real rows only)."""
    spans = tuple((int(s), int(e)) for s, e in line["mask_spans"])
    logprobs = line["generation_logprobs"]
    positions = [p for s, e in spans for p in range(s, e)]
    return ExpectedRow(
        physical_trace_id=str(line["physical_trace_id"]),
        logical_rollout_id=str(line["logical_rollout_id"]),
        trace_index=int(line["trace_index"]),
        input_ids=tuple(int(t) for t in line["input_ids"]),
        mask_spans=spans,
        generation_logprobs=tuple(float(logprobs[p]) for p in positions),
        advantage=float(line["rollout_advantage"]),
        sample_mask=float(line["sample_mask"]),
        media_ids=tuple(line["media_ids"]),
        pixel_digests=tuple(line["pixel_digests"]),
        sentinel_positions=tuple(int(p) for p in line["routed_experts_sentinel_positions"]),
        repaired_positions=tuple(int(p) for p in line["routed_experts_repaired_positions"]),
        generation_policy_version=line["generation_policy_version"],
        routes=_routes(line.get("routed_experts"), len(line["input_ids"])),
    )


def _routes(value: Any, n_tokens: int) -> np.ndarray | None:
    """A line's routes: None, an array the golden reader already decoded, or the JSON lists to decode."""
    if value is None or isinstance(value, np.ndarray):
        return value
    return parse_routes(value, n_tokens)


# ------------------------------------------------------------------------------------ documents


def _error(e: ExpectedError | None) -> dict[str, Any] | None:
    return e.to_json() if e is not None else None


def _error_from(data: Mapping[str, Any] | None) -> ExpectedError | None:
    return None if data is None else ExpectedError(data["code"], data["rollout_id"], data["turn_id"])


def _metric_from(data: Mapping[str, Any]) -> MetricExpectation:
    return MetricExpectation(**dict(data))


def _rollout_json(rollout: ExpectedRollout, parent_index: int | None) -> dict[str, Any]:
    return {**rollout.to_json(), "parent_index": parent_index}


def _rollout_from(data: Mapping[str, Any]) -> ExpectedRollout:
    return ExpectedRollout(
        rollout_id=data["rollout_id"],
        group_key=data["group_key"],
        reward=data["reward"],
        advantage=data["advantage"],
        mask_sample=data["mask_sample"],
        num_sampled_tokens=data["num_sampled_tokens"],
        path=data["path"],
        traces=tuple(
            ExpectedTrace(
                trace_id=t["trace_id"], trace_index=t["trace_index"], turn_ids=tuple(t["turn_ids"]),
                media_ids=tuple(t["media_ids"]), start_reason=t["start_reason"], num_tokens=t["num_tokens"],
                num_sampled_tokens=t["num_sampled_tokens"],
            )
            for t in data["physical_traces"]
        ),
        error=_error_from(data["error"]),
    )


def _check_finite(name: str, metrics: Mapping[str, float]) -> dict[str, float]:
    for key, value in metrics.items():
        if not math.isfinite(float(value)):
            raise ConfigError("invalid_argument", f"{name}: exact metric {key} = {value!r} is not finite")
    return {k: metrics[k] for k in sorted(metrics)}


def expectation_document(
    expectation: ScenarioExpectation,
    *,
    purpose: str,
    trainer: TrainerSettings,
    payloads: Sequence[Sequence[PayloadGroup]],
    tolerances: Mapping[str, float],
) -> dict[str, Any]:
    """``expectation.json`` of one scenario; `payloads[k]` lists step k's payload files.

    `tolerances` are the audit's float tolerances for the trainer's precision
    (|actual − expected| <= atol + rtol·|expected| for logprobs, advantages and exact metrics).
    """
    if len(payloads) != len(expectation.steps):
        raise ConfigError("invalid_argument", f"{len(payloads)} payload lists for {len(expectation.steps)} steps")
    steps = []
    for step, groups in zip(expectation.steps, payloads, strict=True):
        trains = _trains(step)
        steps.append({
            "step": step.step,
            "error": _error(step.error),
            "batch_error": _error(step.batch_error),
            "payloads": [g.to_json() for g in groups],
            "rollouts": [_rollout_json(r, k if trains else None) for k, r in enumerate(step.rollouts)],
            "rows": {
                "file": rows_file(step.step) if trains else None,
                "real": len(step.rows),
                "padding": padding_rows(step, trainer),
            },
            "exact_metrics": _check_finite(f"{expectation.scenario} step {step.step}", step.exact_metrics),
            "metric_expectations": [e.to_json() for e in step.metric_expectations],
        })
    return {
        "scenario": expectation.scenario,
        "purpose": purpose,
        "seed": expectation.seed,
        "verdict": expectation.verdict,
        "error": _error(expectation.error),
        "trainer": trainer.to_json(),
        "tolerances": {k: float(tolerances[k]) for k in sorted(tolerances)},
        "metric_expectations": [e.to_json() for e in expectation.metric_expectations],
        "steps": steps,
    }


def expectation_from_document(
    document: Mapping[str, Any], rows_by_step: Mapping[int, Sequence[Mapping[str, Any]]]
) -> ScenarioExpectation:
    """The `ScenarioExpectation` of an ``expectation.json`` plus its row lines (step → lines, padding included)."""
    steps = []
    for data in document["steps"]:
        lines = rows_by_step.get(data["step"], ())
        rows = tuple(row_from_line(line) for line in lines if int(line["parent_index"]) >= 0)
        steps.append(ExpectedStep(
            step=data["step"],
            rollouts=tuple(_rollout_from(r) for r in data["rollouts"]),
            rows=rows,
            exact_metrics=dict(data["exact_metrics"]),
            metric_expectations=tuple(_metric_from(e) for e in data["metric_expectations"]),
            batch_error=_error_from(data["batch_error"]),
            error=_error_from(data["error"]),
        ))
    return ScenarioExpectation(
        scenario=document["scenario"],
        seed=document["seed"],
        verdict=document["verdict"],
        steps=tuple(steps),
        error=_error_from(document["error"]),
        metric_expectations=tuple(_metric_from(e) for e in document["metric_expectations"]),
    )


# ------------------------------------------------------------------------------------- encoding


def json_document(value: Any) -> bytes:
    """A JSON document as golden bytes: indented, keys in insertion order, UTF-8, final newline."""
    return (json.dumps(value, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def json_lines(values: Sequence[Any], *, sort_keys: bool = False) -> bytes:
    """JSON lines as golden bytes: one compact object per line."""
    return "".join(
        json.dumps(v, separators=(",", ":"), ensure_ascii=False, sort_keys=sort_keys, allow_nan=False) + "\n"
        for v in values
    ).encode("utf-8")


__all__ = [
    "PayloadGroup",
    "TrainerSettings",
    "expectation_document",
    "expectation_from_document",
    "json_document",
    "json_lines",
    "padding_line",
    "padding_rows",
    "payload_file",
    "row_from_line",
    "row_line",
    "rows_file",
    "step_row_lines",
]
