"""GRPO advantages computed independently, in exact rational arithmetic, from rewards alone.

NeMo-RL's definition (nemo-rl-semantics §3.2–3.3): in a group of n valid samples, sample i's
baseline is the mean of the other n−1 rewards under leave-one-out (of all n otherwise) and its
std the unbiased std of those same rewards; `A = r − b`, divided by `std + 1e-6` only where
std > 0; a group of ≤ 1 sample gets advantage 0. Every sample of the group is valid, including
`mask_sample` ones (they leave the loss, not the baseline). Means and variances are exact
fractions here, so equal rewards give exactly std 0 and the result differs from any float
implementation only by the final rounding.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

#: Added to a positive std before dividing.
STD_EPSILON = 1e-6


@dataclass(frozen=True, slots=True)
class GroupAdvantages:
    """Per-sample baseline, std and advantage of one group, in the order the rewards were given."""

    baselines: tuple[float, ...]
    stds: tuple[float, ...]
    advantages: tuple[float, ...]
    #: The advantages before `clip_low/high` (NeMo-RL logs `advantages/sum` from them, semantics §3.7).
    unclipped: tuple[float, ...] = ()


def group_advantages(
    rewards: Sequence[float],
    *,
    leave_one_out: bool = True,
    normalize: bool = True,
    clip_low: float | None = None,
    clip_high: float | None = None,
) -> GroupAdvantages:
    """Baselines, stds and advantages of one group of rewards."""
    exact = [Fraction(float(r)) for r in rewards]
    n = len(exact)
    if n <= 1:
        zero = _clip(0.0, clip_low, clip_high)
        return GroupAdvantages(tuple(float(r) for r in exact), (0.0,) * n, (zero,) * n, (0.0,) * n)
    baselines: list[float] = []
    stds: list[float] = []
    unclipped: list[float] = []
    for i, r in enumerate(exact):
        others = exact[:i] + exact[i + 1 :] if leave_one_out else exact
        m = len(others)
        mean = sum(others, Fraction(0)) / m
        var = sum(((x - mean) ** 2 for x in others), Fraction(0)) / (m - 1) if m > 1 else Fraction(0)
        std = math.sqrt(var) if var > 0 else 0.0
        adv = float(r - mean)
        if normalize and std > 0:
            adv = adv / (std + STD_EPSILON)
        baselines.append(float(mean))
        stds.append(std)
        unclipped.append(adv)
    advantages = tuple(_clip(a, clip_low, clip_high) for a in unclipped)
    return GroupAdvantages(tuple(baselines), tuple(stds), advantages, tuple(unclipped))


def _clip(value: float, low: float | None, high: float | None) -> float:
    """Advantage clipping (after normalisation), as `grpo.advantage_clip_low/high` ask."""
    if low is not None:
        value = max(value, low)
    if high is not None:
        value = min(value, high)
    return value


__all__ = ["STD_EPSILON", "GroupAdvantages", "group_advantages"]
