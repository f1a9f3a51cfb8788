"""What a scenario must produce, as plain data: the oracle writes it, the audit and goldens read it.

Everything here is computed from a scenario's script and its agents' ground-truth logs, never
by running the pipeline. Rows are identified by `physical_trace_id` (never by position), so an
audit of any trainer's rows is independent of row order. Routes are summarised by the positions
that must hold the boundary sentinel and the positions whose placeholder must have been repaired,
plus (optionally) the full expected route tensor of each row for exact comparison.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

ExpectationKind = Literal["equals", "max_abs_dev", "min", "max", "between"]


@dataclass(frozen=True, slots=True)
class ExpectedTrace:
    """One physical trace of the expected plan (mirrors `PhysicalTrace.to_json()`)."""

    trace_id: str
    trace_index: int
    turn_ids: tuple[int, ...]
    media_ids: tuple[str, ...]
    start_reason: str
    num_tokens: int
    num_sampled_tokens: int

    def to_json(self) -> dict[str, Any]:
        return {
            "trace_id": self.trace_id,
            "trace_index": self.trace_index,
            "turn_ids": list(self.turn_ids),
            "media_ids": list(self.media_ids),
            "start_reason": self.start_reason,
            "num_tokens": self.num_tokens,
            "num_sampled_tokens": self.num_sampled_tokens,
        }


@dataclass(frozen=True, slots=True)
class ExpectedError:
    """The contract error a correct consumer must raise for an adversarial rollout or batch."""

    code: str
    rollout_id: str | None
    turn_id: int | None
    #: Why the scenario leads there when the code alone does not say (every rollout failed during collection):
    #: shown in findings, never compared and never written to the expectation's JSON.
    cause: str | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "rollout_id": self.rollout_id, "turn_id": self.turn_id}


@dataclass(frozen=True, slots=True)
class ExpectedRollout:
    """One logical rollout: its plan (or the error it must raise) and its GRPO quantities."""

    rollout_id: str
    group_key: str
    reward: float | None
    advantage: float | None
    mask_sample: bool
    num_sampled_tokens: int
    path: Literal["single", "physical"] | None
    traces: tuple[ExpectedTrace, ...]
    error: ExpectedError | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "rollout_id": self.rollout_id,
            "group_key": self.group_key,
            "reward": self.reward,
            "advantage": self.advantage,
            "mask_sample": self.mask_sample,
            "num_sampled_tokens": self.num_sampled_tokens,
            "path": self.path,
            "physical_traces": [t.to_json() for t in self.traces],
            "error": self.error.to_json() if self.error else None,
        }


@dataclass(frozen=True, slots=True, eq=False)
class ExpectedTrainingStep:
    """What a correct trainer's optimizer step computes, in float64 (the oracle's `compactsim.harness.oracle.step`)."""

    step: int
    loss: float
    actor_loss: float
    #: KL term of the loss divided by β (NeMo-RL's `kl_penalty` metric); 0 without KL.
    kl_penalty: float
    #: Global gradient norm before clipping.
    grad_norm: float
    lr: float
    #: Σ sample_mask · trained tokens over the whole logical batch (NeMo-RL's `global_valid_toks`).
    global_valid_tokens: float
    #: Σ sample_mask over the batch's rows (NeMo-RL's `global_valid_seqs`; padding rows carry 0).
    global_valid_seqs: float
    #: Σ m·exp(|generation − current logprob|) / (global_valid_toks + 1e-8) before the update (NeMo-RL §4.6).
    token_mult_prob_error: float
    # The loss's other diagnostics (NeMo-RL §4.6; formulas and aggregation in
    # `compactsim.harness.oracle.step_metrics`). Means are over trained tokens, normalised by
    # global_valid_toks + 1e-8, summed over micro-batches; extrema are over trained tokens.
    #: Masked means of the PPO ratio r and of the clipped ratio r̂.
    probs_ratio: float
    probs_ratio_clamped: float
    #: Extrema of r and r̂ over trained tokens; +inf (min) / -inf (max) when the step trains none.
    probs_ratio_min: float
    probs_ratio_max: float
    probs_ratio_clamped_min: float
    probs_ratio_clamped_max: float
    #: Masked means of the unclamped KL estimator k(prev − gen) and k(gen − prev), and of the JS divergence.
    gen_kl_error: float
    policy_kl_error: float
    js_divergence_error: float
    #: Masked mean of the importance weight exp(prev − gen) after truncation.
    sampling_importance_ratio: float
    #: −masked mean of exp(lp − gen)·lp.
    approx_entropy: float
    #: Share of trained tokens (tis, icepop) or sequences (seq-mask-tis) out of the truncation bounds; None
    #: without truncated importance sampling (the metric does not exist then).
    is_oob_ratio: float | None
    #: Σ sample_mask over the batch's rows, a count (NeMo-RL's `num_valid_samples`, summed over micro-batches).
    num_valid_samples: float
    #: Parameter name → expected value after the step (float64 tensors).
    params_after: Any = field(repr=False)
    #: Parameter name → the gradient the optimizer must apply: after the dp all-reduce and clipping
    #: (float64 tensors); None where not computed.
    clipped_gradient: Any = field(default=None, repr=False)
    #: The factor clipping scaled the gradient by, min(1, max_grad_norm / (grad_norm + 1e-6)); None when
    #: clipping is off (``max_grad_norm: null``) or not computed.
    clip_coefficient: float | None = None
    #: Names of the parameters no trained row reached (autograd left their gradient None): the only ones
    #: an update may leave out.
    unreached: frozenset[str] = frozenset()
    #: The (β1, β2) and ε of the oracle's AdamW (torch's defaults, which NeMo-RL's configs keep): what every
    #: parameter group of the trainer's optimizer must hold.
    adam_betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-8
    #: Parameter name → the decoupled weight decay λ the oracle applied (the configured value everywhere, or
    #: Megatron's no-decay convention when the trainer's groups show it); empty when not computed.
    weight_decays: Mapping[str, float] = field(default_factory=dict, repr=False)


@dataclass(frozen=True, slots=True, eq=False)
class ExpectedRow:
    """One real (non-padding) training row, exactly as a correct materializer must build it."""

    physical_trace_id: str
    logical_rollout_id: str
    trace_index: int
    input_ids: tuple[int, ...]
    #: Half-open [start, end) spans of trainable (sampled) tokens, in row positions.
    mask_spans: tuple[tuple[int, int], ...]
    #: Behaviour logprob of every trainable position, in position order.
    generation_logprobs: tuple[float, ...]
    #: The parent's logical advantage (every trainable token carries it; 0 elsewhere).
    advantage: float
    sample_mask: float
    media_ids: tuple[str, ...]
    #: sha256 of each image's RGB uint8 pixels (H, W, 3 row-major), in `media_ids` order.
    pixel_digests: tuple[str, ...]
    #: Row positions whose route must be the all -1 sentinel (last token of a non-final trace).
    sentinel_positions: tuple[int, ...]
    #: Row positions whose decode placeholder must have been repaired from the next call's prefill.
    repaired_positions: tuple[int, ...]
    generation_policy_version: int | None = None
    #: Full expected routes (len(input_ids), L, K) when the scenario records routes, else None.
    routes: np.ndarray | None = field(default=None, repr=False)

    @property
    def trainable_positions(self) -> tuple[int, ...]:
        return tuple(p for start, end in self.mask_spans for p in range(start, end))

    def to_json(self) -> dict[str, Any]:
        return {
            "physical_trace_id": self.physical_trace_id,
            "logical_rollout_id": self.logical_rollout_id,
            "trace_index": self.trace_index,
            "input_ids": list(self.input_ids),
            "mask_spans": [list(s) for s in self.mask_spans],
            "generation_logprobs": list(self.generation_logprobs),
            "advantage": self.advantage,
            "sample_mask": self.sample_mask,
            "media_ids": list(self.media_ids),
            "pixel_digests": list(self.pixel_digests),
            "sentinel_positions": list(self.sentinel_positions),
            "repaired_positions": list(self.repaired_positions),
            "generation_policy_version": self.generation_policy_version,
        }


@dataclass(frozen=True, slots=True)
class MetricExpectation:
    """A declarative check on one metric of one step (or on an expression over all steps)."""

    metric: str
    kind: ExpectationKind
    value: float | None = None
    low: float | None = None
    high: float | None = None
    #: Reference for `max_abs_dev` (|actual - reference| <= value).
    reference: float | None = None
    #: None: checked on every step's value. Otherwise a function over the run's per-step values:
    #: `mean`/`min`/`max`/`sum`/`first`/`last` check one aggregated value; `all`/`any` check each
    #: step and require every / at least one step to pass.
    aggregate: str | None = None

    @property
    def expression(self) -> str:
        """How the scenario spelled it: ``metric`` or ``fn(metric)``."""
        return self.metric if self.aggregate is None else f"{self.aggregate}({self.metric})"

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in (
            ("metric", self.metric), ("kind", self.kind), ("value", self.value),
            ("low", self.low), ("high", self.high), ("reference", self.reference), ("aggregate", self.aggregate),
        ) if v is not None}


@dataclass(frozen=True, slots=True)
class ExpectedStep:
    """Everything one optimizer step of a scenario must show."""

    step: int
    rollouts: tuple[ExpectedRollout, ...]
    rows: tuple[ExpectedRow, ...]
    #: Exact batch metrics the oracle can compute (row counts, logical advantage stats, tokens...).
    exact_metrics: dict[str, float]
    metric_expectations: tuple[MetricExpectation, ...] = ()
    #: Set when the whole batch must be refused (e.g. incomplete_group, duplicate ids).
    batch_error: ExpectedError | None = None
    #: The error the step must stop with: the first rollout error in the order results reach the
    #: trainer, else `batch_error`; None for a step that trains.
    error: ExpectedError | None = None

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (rows without their route tensors)."""
        return {
            "step": self.step,
            "rollouts": [r.to_json() for r in self.rollouts],
            "rows": [r.to_json() for r in self.rows],
            "exact_metrics": dict(self.exact_metrics),
            "metric_expectations": [e.to_json() for e in self.metric_expectations],
            "batch_error": self.batch_error.to_json() if self.batch_error else None,
            "error": self.error.to_json() if self.error else None,
        }


@dataclass(frozen=True, slots=True)
class ScenarioExpectation:
    """The oracle's verdict for a whole scenario run."""

    scenario: str
    seed: int
    verdict: Literal["success", "error"]
    steps: tuple[ExpectedStep, ...]
    #: The first error the run must stop with, for adversarial scenarios.
    error: ExpectedError | None = None
    #: Checks over all steps (`MetricExpectation.aggregate` set); per-step checks live in each step.
    metric_expectations: tuple[MetricExpectation, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """Plain JSON of the whole expectation (what `compactsim export` can serialise)."""
        return {
            "scenario": self.scenario,
            "seed": self.seed,
            "verdict": self.verdict,
            "error": self.error.to_json() if self.error else None,
            "steps": [s.to_json() for s in self.steps],
            "metric_expectations": [e.to_json() for e in self.metric_expectations],
        }


__all__ = [
    "ExpectationKind",
    "ExpectedError",
    "ExpectedRollout",
    "ExpectedRow",
    "ExpectedStep",
    "ExpectedTrace",
    "ExpectedTrainingStep",
    "MetricExpectation",
    "ScenarioExpectation",
]
