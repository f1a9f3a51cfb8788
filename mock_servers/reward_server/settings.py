"""Settings of the mock reward server: the reward rule and the `mask_sample` flags (pydantic, extra=forbid).

The reward of a rollout is a pure function of (these settings, the verify request): by rollout
index, by a fixed repeating pattern, by a predicate on the final answer, or one fixed value;
`by_rollout_id` overrides any rule for named rollouts.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from compactsim.harness.core.config_model import NoBooleanNumbers


class _Strict(NoBooleanNumbers):
    #: a NaN or infinite reward would only be refused later, by the trainer's ingest, far from its cause
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class RewardRule(_Strict):
    """How a reward is chosen.

    - ``fixed``: always `value`.
    - ``by_index``: `rewards[rollout_index]`, else `default`.
    - ``pattern``: `pattern[rollout_index % len(pattern)]`.
    - ``predicate``: `reward_true` when the final assistant text contains `contains` (or equals
      `equals`), else `reward_false`.
    """

    kind: Literal["fixed", "by_index", "pattern", "predicate"] = "fixed"
    value: float = 1.0
    rewards: dict[int, float] = Field(default_factory=dict)
    pattern: tuple[float, ...] = ()
    contains: str | None = None
    equals: str | None = None
    reward_true: float = 1.0
    reward_false: float = 0.0
    default: float = 0.0

    @model_validator(mode="after")
    def _complete(self) -> RewardRule:
        if self.kind == "pattern" and not self.pattern:
            raise ValueError("rule kind 'pattern' needs a non-empty pattern")
        if self.kind == "predicate" and (self.contains is None) == (self.equals is None):
            raise ValueError("rule kind 'predicate' needs exactly one of contains= or equals=")
        return self


class RewardSettings(_Strict):
    """Everything the reward server's answers depend on."""

    rule: RewardRule = RewardRule()
    by_rollout_id: dict[str, float] = Field(default_factory=dict)
    #: rollout indices whose result carries ``instance_config.mask_sample = true``
    mask_sample_indices: frozenset[int] = frozenset()
    #: rollout ids whose result carries ``instance_config.mask_sample = true``
    mask_sample_rollout_ids: frozenset[str] = frozenset()
    max_body_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    #: seconds from a request's headers to the end of its body; past it, 408 and a closed connection
    #: (a client that sends less than it declared cannot hold one forever)
    body_timeout_s: float = Field(default=10.0, gt=0.0, le=3600.0)
    #: JSON nesting levels of a `/verify` body (a Gym response nests about 10 deep)
    max_json_depth: int = Field(default=64, ge=4, le=1000)
    #: digits of any integer literal in a `/verify` body
    max_int_digits: int = Field(default=20, ge=1, le=4000)


__all__ = ["RewardRule", "RewardSettings"]
