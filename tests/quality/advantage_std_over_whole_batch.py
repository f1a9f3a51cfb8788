"""Broken backend: the GRPO baseline is per group (leave-one-out, as configured), but the advantage is divided by the
std of the whole batch's rewards instead of each group's (a "normalise advantages over the batch" step kept from a
PPO trainer, as OpenRLHF's REINFORCE++-baseline or a global advantage whitening does).

NeMo-RL's std comes from the same per-prompt mask as the baseline (nemo-rl-semantics §3.2). With one group per step
the two stds differ already under leave-one-out; with several groups the scale of every group's advantages depends
on how the other groups in the step happened to score. A group whose rewards are all equal keeps advantage 0, so a
batch of uniform groups shows nothing.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from compactsim.harness.pipeline.advantages import (
    STD_EPSILON,
    clip_advantages,
    compute_logical_advantages,
    grpo_advantages,
)
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.materializer import prepare_trace_batch

EXPECTED_CHECK = "row.advantage"
SCENARIO = "float32-graded-group"  # one group of three graded rewards (1, 0.5, 0)


class Backend(ReferenceBackend):
    name = "advantage-std-over-whole-batch"

    def materialize(self, plans, cfg):
        acfg = cfg.advantage_config()
        ref = compute_logical_advantages([p.evidence for p in plans], acfg)
        rewards = np.asarray(ref.rewards, dtype=np.float64)
        raw = np.zeros(len(rewards))
        keys = np.asarray(ref.group_keys, dtype=object)
        for key in dict.fromkeys(ref.group_keys):  # the per-group baseline, left unnormalised
            idx = np.flatnonzero(keys == key)
            raw[idx], _, _ = grpo_advantages(rewards[idx], leave_one_out=acfg.use_leave_one_out_baseline,
                                             normalize=False)
        if acfg.normalize_rewards and len(rewards) > 1:
            batch_std = float(np.std(rewards, ddof=1))
            if batch_std > 0:
                raw = raw / (batch_std + STD_EPSILON)
        adv = clip_advantages(raw, acfg.advantage_clip_low, acfg.advantage_clip_high)
        logical = replace(ref, advantages=tuple(map(float, adv)), unclipped_advantages=tuple(map(float, raw)))
        return prepare_trace_batch(plans, None, logical, cfg.materialize_config())
