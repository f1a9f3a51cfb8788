"""GRPO advantages per logical rollout, with baselines computed per group of the same task.

One advantage per logical rollout, never per row: compaction may split a rollout into several
rows, and every trainable token of each of them receives the same logical value. Groups are
keyed by `RolloutEvidence.group_key` (group id, else task id), never by row or prompt tokens.
Rollouts flagged `mask_sample` count in their group's baseline and std; they leave the loss later
(sample_mask 0), exactly as NeMo-RL's "dropped from the loss but still count for advantages".
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from compactsim.harness.core.errors import ContractError
from compactsim.harness.core.evidence import RolloutEvidence
from compactsim.harness.pipeline.train_config import AdvantageConfig

#: Added to a positive std before dividing ("don't sharpen groups with no variation").
STD_EPSILON = 1e-6


def rollout_sort_key(evidence: RolloutEvidence) -> tuple[Any, ...]:
    """Canonical batch order: group key, then rollout index (when known), then rollout id.

    Everything downstream iterates in this order, so rows and advantages do not depend on the
    order in which rollouts arrived.
    """
    index = evidence.rollout_index
    return (evidence.group_key, index is None, index if index is not None else 0, evidence.rollout_id)


def grpo_baseline_and_std(rewards: Sequence[float], *, leave_one_out: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample baseline and std of one group (float64; every sample valid).

    With leave-one-out, sample i's baseline is the mean of the *other* rewards and its std the
    unbiased std of those others: `[1, 2, 3] → b=[2.5, 2, 1.5], std=[0.7071, 1.4142, 0.7071]`.
    A group of ≤ 1 sample gets baseline = reward and std = 0, hence advantage 0. Computed in two
    passes, so equal rewards give exactly std 0 and advantage 0.
    """
    r = [float(x) for x in rewards]
    n = len(r)
    if n <= 1:
        return np.asarray(r, dtype=np.float64), np.zeros(n, dtype=np.float64)
    baselines = np.empty(n, dtype=np.float64)
    stds = np.empty(n, dtype=np.float64)
    for i in range(n):
        others = r[:i] + r[i + 1 :] if leave_one_out else r
        m = len(others)
        if min(others) == max(others):
            baselines[i], stds[i] = others[0], 0.0
            continue
        b = math.fsum(others) / m
        baselines[i] = b
        stds[i] = math.sqrt(math.fsum((x - b) ** 2 for x in others) / (m - 1)) if m > 1 else 0.0
    return baselines, stds


def grpo_advantages(
    rewards: Sequence[float],
    *,
    leave_one_out: bool = True,
    normalize: bool = True,
    clip_low: float | None = None,
    clip_high: float | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(advantages, baselines, stds) of one group: `A = r − b`, divided by `std + 1e-6` only where std > 0."""
    r = np.asarray([float(x) for x in rewards], dtype=np.float64)
    b, std = grpo_baseline_and_std(r, leave_one_out=leave_one_out)
    adv = r - b
    if len(r) <= 1:
        adv = np.zeros_like(r)
    if normalize:
        pos = std > 0
        adv[pos] = adv[pos] / (std[pos] + STD_EPSILON)
    return clip_advantages(adv, clip_low, clip_high), b, std


def clip_advantages(adv: np.ndarray, low: float | None, high: float | None) -> np.ndarray:
    """`grpo.advantage_clip_low/high` (NeMo-RL `_clip_grpo_advantages`); `adv` itself when neither is set."""
    return adv if low is None and high is None else np.clip(adv, low, high)


@dataclass(frozen=True, slots=True)
class LogicalAdvantages:
    """One GRPO advantage per logical rollout, in canonical order (`rollout_sort_key`)."""

    rollout_ids: tuple[str, ...]
    group_keys: tuple[str, ...]
    rewards: tuple[float, ...]
    baselines: tuple[float, ...]
    stds: tuple[float, ...]
    advantages: tuple[float, ...]
    mask_sample: tuple[bool, ...]
    #: The advantages before `advantage_clip_low/high` (NeMo-RL logs `advantages/sum` from them,
    #: nemo-rl-semantics §3.7); empty in a value built without them (then read as `advantages`).
    unclipped_advantages: tuple[float, ...] = ()

    def unclipped(self, i: int) -> float:
        """Rollout i's advantage before clipping."""
        return self.unclipped_advantages[i] if self.unclipped_advantages else self.advantages[i]

    def index(self, rollout_id: str) -> int:
        """Position of `rollout_id`; `KeyError` when it is not in the batch."""
        try:
            return self.rollout_ids.index(rollout_id)
        except ValueError:
            raise KeyError(f"rollout {rollout_id!r} has no logical advantage") from None

    def advantage_of(self, rollout_id: str) -> float:
        return self.advantages[self.index(rollout_id)]

    def to_json(self) -> list[dict[str, Any]]:
        return [
            {
                "rollout_id": rid,
                "group_key": g,
                "reward": r,
                "baseline": b,
                "std": s,
                "advantage": a,
                "mask_sample": m,
            }
            for rid, g, r, b, s, a, m in zip(
                self.rollout_ids, self.group_keys, self.rewards, self.baselines, self.stds, self.advantages,
                self.mask_sample, strict=True,
            )
        ]


def check_unique_rollouts(evidence: Iterable[RolloutEvidence]) -> None:
    """Raise `duplicate_logical_rollout_id` when two results share a logical rollout id."""
    counts = Counter(e.rollout_id for e in evidence)
    dups = sorted(rid for rid, n in counts.items() if n > 1)
    if dups:
        raise ContractError(
            "duplicate_logical_rollout_id",
            rollout_id=dups[0],
            detail=f"{len(dups)} logical rollout id(s) occur more than once in the batch: "
            + ", ".join(f"{rid!r} ×{counts[rid]}" for rid in dups[:5]),
        )


def check_group_sizes(evidence: Iterable[RolloutEvidence], num_generations_per_prompt: int | None) -> None:
    """Every group holds exactly `num_generations_per_prompt` rollouts (skipped when None)."""
    if num_generations_per_prompt is None:
        return
    groups: dict[str, list[str]] = {}
    for e in evidence:
        groups.setdefault(e.group_key, []).append(e.rollout_id)
    for key in sorted(groups):
        members = sorted(groups[key])
        n = len(members)
        if n < num_generations_per_prompt:
            raise ContractError(
                "incomplete_group",
                rollout_id=members[0],
                detail=f"group {key!r} has {n} rollout(s) {members[:8]}; num_generations_per_prompt is "
                f"{num_generations_per_prompt}, so its baseline would be computed on a partial group",
            )
        if n > num_generations_per_prompt:
            raise ContractError(
                "oversized_group",
                rollout_id=members[0],
                detail=f"group {key!r} has {n} rollouts {members[:8]}; num_generations_per_prompt is "
                f"{num_generations_per_prompt}",
            )


def _reward(e: RolloutEvidence) -> float:
    if e.reward is None:
        raise ContractError(
            "malformed_payload",
            rollout_id=e.rollout_id,
            detail="the result has no reward; GRPO needs one per logical rollout (pass Gym's /run result "
            "{'response': ..., 'reward': ...}, not the bare response)",
        )
    reward = float(e.reward)
    if not math.isfinite(reward):
        raise ContractError("malformed_payload", rollout_id=e.rollout_id, detail=f"reward is {reward!r}; expected a finite number")
    return reward


def compute_logical_advantages(evidence: Sequence[RolloutEvidence], cfg: AdvantageConfig | None = None) -> LogicalAdvantages:
    """GRPO advantages for every logical rollout of a batch, grouped by task/group id."""
    cfg = cfg or AdvantageConfig()
    ordered = sorted(evidence, key=rollout_sort_key)
    check_unique_rollouts(ordered)
    check_group_sizes(ordered, cfg.num_generations_per_prompt)
    rewards = [_reward(e) for e in ordered]
    raw = np.zeros(len(ordered), dtype=np.float64)  # before the clip: what NeMo-RL logs as advantages/sum
    base = np.zeros(len(ordered), dtype=np.float64)
    std = np.zeros(len(ordered), dtype=np.float64)
    start = 0
    while start < len(ordered):  # groups are contiguous in canonical order
        end = start
        while end < len(ordered) and ordered[end].group_key == ordered[start].group_key:
            end += 1
        raw[start:end], base[start:end], std[start:end] = grpo_advantages(
            rewards[start:end], leave_one_out=cfg.use_leave_one_out_baseline, normalize=cfg.normalize_rewards)
        start = end
    adv = clip_advantages(raw, cfg.advantage_clip_low, cfg.advantage_clip_high)
    return LogicalAdvantages(
        rollout_ids=tuple(e.rollout_id for e in ordered),
        group_keys=tuple(e.group_key for e in ordered),
        rewards=tuple(rewards),
        baselines=tuple(float(x) for x in base),
        stds=tuple(float(x) for x in std),
        advantages=tuple(float(x) for x in adv),
        mask_sample=tuple(bool(e.mask_sample) for e in ordered),
        unclipped_advantages=tuple(float(x) for x in raw),
    )


__all__ = [
    "STD_EPSILON",
    "LogicalAdvantages",
    "clip_advantages",
    "check_group_sizes",
    "check_unique_rollouts",
    "compute_logical_advantages",
    "grpo_advantages",
    "grpo_baseline_and_std",
    "rollout_sort_key",
]
