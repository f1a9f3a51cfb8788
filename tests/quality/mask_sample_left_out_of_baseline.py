"""Broken backend: `mask_sample` rollouts are dropped from their group's GRPO baseline and std.

NeMo-RL calls `calculate_baseline_and_std_per_prompt` with valid_mask = ones: masked samples still enter
the baseline, they only leave the loss (nemo-rl-semantics §3.2, §3.4 "Consequence").
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from compactsim.harness.pipeline.advantages import clip_advantages, compute_logical_advantages, grpo_advantages
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.materializer import prepare_trace_batch

EXPECTED_CHECK = "row.advantage"
SCENARIO = "layout-dp2-microbatch2-mask-sample"  # rollout 1 of (1, 0, 1) is mask_sample'd


class Backend(ReferenceBackend):
    name = "mask-sample-left-out-of-baseline"

    def materialize(self, plans, cfg):
        acfg = cfg.advantage_config()
        ref = compute_logical_advantages([p.evidence for p in plans], acfg)
        raw = np.array([ref.unclipped(k) for k in range(len(ref.rollout_ids))], dtype=float)
        groups: dict[str, list[int]] = {}
        for k, key in enumerate(ref.group_keys):
            groups.setdefault(key, []).append(k)
        for idx in groups.values():
            kept = [k for k in idx if not ref.mask_sample[k]]
            if len(kept) == len(idx) or not kept:
                continue
            a, _, _ = grpo_advantages([ref.rewards[k] for k in kept], leave_one_out=acfg.use_leave_one_out_baseline,
                                      normalize=acfg.normalize_rewards)
            raw[kept] = a
        adv = clip_advantages(raw, acfg.advantage_clip_low, acfg.advantage_clip_high)
        logical = replace(ref, advantages=tuple(map(float, adv)), unclipped_advantages=tuple(map(float, raw)))
        return prepare_trace_batch(plans, None, logical, cfg.materialize_config())
