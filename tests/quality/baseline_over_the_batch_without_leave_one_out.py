"""Broken backend: with leave-one-out off, the baseline is the whole batch's mean reward, not the group's.

The leave-one-out branch groups by prompt; the plain branch was written as `rewards.mean()` over the flat batch. The
std stays per group. Wherever every group holds the same rewards (every multi-group catalogue scenario before
`baseline-per-group-without-leave-one-out`) the two means agree, and single-group scenarios cannot tell them apart.
NeMo-RL's baseline is the prompt group's mean (nemo-rl-semantics §3.2).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from compactsim.harness.pipeline.advantages import STD_EPSILON, clip_advantages, compute_logical_advantages
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.materializer import prepare_trace_batch

EXPECTED_CHECK = "row.advantage"
SCENARIO = "baseline-per-group-without-leave-one-out"


class Backend(ReferenceBackend):
    name = "baseline-over-the-batch-without-leave-one-out"

    def materialize(self, plans, cfg):
        acfg = cfg.advantage_config()
        ref = compute_logical_advantages([p.evidence for p in plans], acfg)
        if acfg.use_leave_one_out_baseline:
            return super().materialize(plans, cfg)
        rewards, stds = np.asarray(ref.rewards, dtype=np.float64), np.asarray(ref.stds, dtype=np.float64)
        mean = float(rewards.mean())
        raw = rewards - mean
        sizes = {key: ref.group_keys.count(key) for key in ref.group_keys}
        raw[[sizes[key] == 1 for key in ref.group_keys]] = 0.0  # a group of one has no baseline, as the reference
        if acfg.normalize_rewards:
            spread = stds > 0
            raw[spread] /= stds[spread] + STD_EPSILON
        adv = clip_advantages(raw, acfg.advantage_clip_low, acfg.advantage_clip_high)
        logical = replace(ref, baselines=(mean,) * len(rewards), advantages=tuple(map(float, adv)),
                          unclipped_advantages=tuple(map(float, raw)))
        return prepare_trace_batch(plans, None, logical, cfg.materialize_config())
