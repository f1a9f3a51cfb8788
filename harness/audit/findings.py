"""One audit finding: what differs, where (scenario, step, row, token), and how to reproduce it.

Every check of the audit reports through `Finding`; its `check` is one of `CHECKS`, a closed
vocabulary (each name has one meaning, listed with what usually causes it). Findings sort by
(step, check order, row, position), so an audit's output never depends on row order.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from typing import Any

#: Every check name with what it means; the order is the order findings are reported in.
CHECKS: dict[str, str] = {
    "run.harness_error": "The harness itself failed (invalid scenario, server start, oracle): no verdict was reached.",
    "backend.error": "The backend raised an exception no contract names, or returned a malformed result "
    "(the exception type, message and raising frame are in the message).",
    "verdict.unexpected_error": "The run raised an error although the scenario must succeed.",
    "verdict.expected_error": "The scenario must be refused with an error code, but the run succeeded.",
    "verdict.error_code": "The run was refused with a different error code than the scenario's.",
    "verdict.error_location": "The right error code, raised for another rollout or turn.",
    "scenario.declared_verdict": "The scenario's own expect disagrees with the verdict its script, faults and mutations lead to.",
    "steps.count": "The run trained a different number of optimizer steps than the scenario has.",
    "rows.missing": "An expected physical trace has no row in the batch.",
    "rows.unexpected": "The batch has a real row for a physical trace the oracle does not expect.",
    "rows.duplicate": "Two rows of one batch claim the same physical trace id.",
    "row.owner": "parent_indices or the row's logical id point at another logical rollout (row ownership).",
    "row.trace_index": "The row's trace index inside its rollout differs.",
    "row.length": "The row's unpadded length differs (a trace cut short or flattened across a boundary).",
    "row.tokens": "A token id differs (wrong prompt, wrong trace end, retokenization).",
    "row.mask": "The trainable-token mask differs (prompt trained, sampled ids dropped, boundary shifted).",
    "row.logprobs": "A behaviour logprob differs or is misaligned with its token.",
    "row.advantage": "A trainable token carries another advantage than its parent rollout's.",
    "row.advantage_off_mask": "A non-trainable position carries an advantage that is neither 0 nor the parent's "
    "(NeMo-RL's broadcast over the row is accepted).",
    "row.sample_mask": "The row's sample mask differs (mask_sample rollouts must not train).",
    "row.policy_version": "The row's generation policy version differs.",
    "row.media": "The row's ordered image history (media ids) differs.",
    "row.pixels": "The pixels behind the row's images differ (digest of RGB uint8 H×W×3).",
    "row.sentinel": "A boundary position lacks the all -1 route sentinel (or has one where it must not).",
    "row.route": "A replayed route differs from the route the generator recorded.",
    "row.routes_missing": "Router replay is on and the server recorded routes, but the row trained without any.",
    "rollout.advantage": "A logical rollout's GRPO advantage differs.",
    "padding.order": "A padding row sits before a real row.",
    "padding.weight": "A padding row has a non-zero mask, advantage, sample mask or length.",
    "padding.divisibility": "The row count is not divisible by dp_size × micro_batch_size.",
    "padding.count": "More (or fewer) padding rows than needed to reach divisibility.",
    "counts.optimizer": "Not exactly one optimizer step per logical batch.",
    "counts.scheduler": "Not exactly one LR-scheduler increment per logical batch.",
    "counts.reported": "The backend reports step counts that differ from what the harness measured of its state.",
    "train.lr": "The optimizer stepped with (or reported) another learning rate than the schedule gives, read from its param groups or from the update itself.",
    "train.loss": "The reported loss differs from the oracle's clipped-PG loss of the expected rows.",
    "train.grad_norm": "The reported gradient norm (before clipping) differs from the oracle's.",
    "train.gradient": "The gradient the optimizer applied (read from AdamW's first moment) differs from the oracle's "
    "all-reduced, clipped gradient (max |diff| named, with the overall ratio).",
    "train.update": "A parameter tensor after the step differs from the oracle's AdamW update (max |diff| named).",
    "train.continuity": "A step did not start from the state the previous step left (weights reloaded, counters or "
    "optimizer moments reset).",
    "train.metric": "A loss metric the backend reports differs from the oracle's (actor_loss, kl_penalty, "
    "token_mult_prob_error, probs_ratio, probs_ratio_clamped, probs_ratio[_clamped]_min/max, gen_kl_error, "
    "policy_kl_error, js_divergence_error, sampling_importance_ratio, approx_entropy, is_oob_ratio, "
    "num_valid_samples, global_valid_toks/seqs); the key is named first in the message.",
    "metric.missing": "The step did not report a metric the scenario checks.",
    "metric.exact": "A metric the oracle computes exactly has another value.",
    "metric.expectation": "A declared metric expectation does not hold.",
}
_ORDER = {name: i for i, name in enumerate(CHECKS)}


def reproduce_command(
    scenario: str,
    seed: int,
    *,
    backend: str | None = None,
    steps: int | None = None,
    precision: str | None = None,
) -> str:
    """The one-line command that re-runs `scenario` exactly (default backend omitted)."""
    parts = ["compactsim", "run", scenario, "--seed", str(seed)]
    if steps is not None:
        parts += ["--steps", str(steps)]
    if precision is not None:
        parts += ["--precision", precision]
    if backend:
        parts += ["--backend", backend]
    return shlex.join(parts)


def json_value(value: Any) -> Any:
    """`value` as strict JSON (tuples → lists, numpy scalars → numbers, non-finite floats → strings)."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
        return value
    return str(value)


@dataclass(frozen=True, slots=True)
class Finding:
    """One difference between what a step trained on and what the oracle expects."""

    scenario: str
    #: Optimizer step (0-based); None for run-level findings (verdict, step count, run expressions).
    step: int | None
    check: str
    #: Physical trace id of the row (None when the finding is not about one row).
    row: str | None
    #: Token position inside the row (or image index for `row.media`/`row.pixels`), else None.
    position: int | None
    expected: Any
    actual: Any
    message: str
    reproduce: str

    def __post_init__(self) -> None:
        if self.check not in CHECKS:
            raise ValueError(f"unknown audit check {self.check!r}; expected one of CHECKS")

    def sort_key(self) -> tuple[int, int, str, int]:
        return (
            -1 if self.step is None else self.step,
            _ORDER[self.check],
            self.row or "",
            -1 if self.position is None else self.position,
        )

    def location(self) -> str:
        """`scenario step 3 row <id> token 41` — the parts that apply."""
        parts = [self.scenario]
        if self.step is not None:
            parts.append(f"step {self.step}")
        if self.row is not None:
            parts.append(f"row {self.row}")
        if self.position is not None:
            parts.append(f"{'image' if self.check in ('row.media', 'row.pixels') else 'token'} {self.position}")
        return " ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "step": self.step,
            "check": self.check,
            "row": self.row,
            "position": self.position,
            "expected": json_value(self.expected),
            "actual": json_value(self.actual),
            "message": self.message,
            "reproduce": self.reproduce,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Finding:
        return cls(
            scenario=data["scenario"],
            step=data["step"],
            check=data["check"],
            row=data["row"],
            position=data["position"],
            expected=data["expected"],
            actual=data["actual"],
            message=data["message"],
            reproduce=data["reproduce"],
        )

    def __str__(self) -> str:
        return (
            f"[{self.check}] {self.location()}: {self.message} (expected {_short(self.expected)}, "
            f"actual {_short(self.actual)})\n  reproduce: {self.reproduce}"
        )


def _short(value: Any, limit: int = 120) -> str:
    text = repr(json_value(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def sort_findings(findings: list[Finding]) -> tuple[Finding, ...]:
    """Findings in report order (independent of the order checks or rows were visited)."""
    return tuple(sorted(findings, key=lambda f: (f.sort_key(), repr(json_value(f.expected)), repr(json_value(f.actual)))))


__all__ = ["CHECKS", "Finding", "json_value", "reproduce_command", "sort_findings"]
