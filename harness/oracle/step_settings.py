"""The training-step settings the oracle reads from a scenario, as plain values with their documented defaults.

Defaults: the loss settings are NeMo-RL's `ClippedPGLossConfig` defaults
(`shared/reference/nemo-rl-semantics.md` §4.1); the optimizer is AdamW with NeMo-RL's betas and
epsilon, and compactsim's documented policy defaults (README "What the audit compares":
learning rate 1e-3, no weight decay, gradient clipping at 1.0, no warmup). They are written here
again, not imported from the pipeline, so a pipeline default that drifts is a finding, not a
shared mistake (a unit test keeps the two tables equal).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class LossSettings:
    """ClippedPG settings (NeMo-RL §4.1 names and defaults)."""

    ratio_clip_min: float = 0.2
    ratio_clip_max: float = 0.2
    ratio_clip_c: float | None = None
    reference_policy_kl_penalty: float = 0.01
    reference_policy_kl_type: str = "k3"
    kl_input_clamp_value: float | None = 20.0
    kl_output_clamp_value: float | None = 10.0
    use_importance_sampling_correction: bool = False
    truncated_importance_sampling_type: str | None = None
    truncated_importance_sampling_ratio: float | None = None
    truncated_importance_sampling_ratio_min: float | None = None
    force_on_policy_ratio: bool = False
    disable_ppo_ratio: bool = False


@dataclass(frozen=True, slots=True)
class OptimizerSettings:
    """AdamW, gradient clipping and the learning-rate schedule."""

    learning_rate: float = 1e-3
    weight_decay: float = 0.0
    max_grad_norm: float | None = 1.0
    lr_warmup_steps: int = 0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8


@dataclass(frozen=True, slots=True)
class StepSettings:
    """Everything the step oracle needs to know about the trainer, from the scenario's config alone."""

    loss: LossSettings = LossSettings()
    optimizer: OptimizerSettings = OptimizerSettings()
    precision: str = "float64"
    router_replay: bool = False
    max_total_sequence_length: int = 4096

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> StepSettings:
        """Settings from a trainer mapping (`{"loss_fn": ..., "policy": ...}`), defaults filled in."""
        loss_values: Mapping[str, Any] = values.get("loss_fn", {}) or {}
        policy: Mapping[str, Any] = values.get("policy", {}) or {}
        loss_fields = set(LossSettings.__dataclass_fields__)
        loss = LossSettings(**{k: v for k, v in loss_values.items() if k in loss_fields})
        opt_fields = set(OptimizerSettings.__dataclass_fields__) - {"betas", "eps"}
        optimizer = OptimizerSettings(**{k: policy[k] for k in opt_fields if k in policy})
        return cls(
            loss=loss,
            optimizer=optimizer,
            precision=str(policy.get("precision", "float32")),
            router_replay=bool(policy.get("router_replay_enabled", False)),
            max_total_sequence_length=int(policy.get("max_total_sequence_length", 4096)),
        )

    @classmethod
    def of(cls, scenario: Any) -> StepSettings:
        """Settings of a `Scenario` (its defaults merged with its `trainer` block)."""
        return cls.from_values(scenario.trainer_values())


__all__ = ["LossSettings", "OptimizerSettings", "StepSettings"]
