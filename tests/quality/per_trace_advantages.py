"""Broken backend: GRPO advantages computed over physical traces instead of logical rollouts.

Each row is treated as a sample of its group with its rollout's reward, so a rollout that compacted
into three rows weighs three times in its group's baseline and std (nemo-rl-semantics §3.2 groups
logical samples; the PR trains each trace with the logical rollout's advantage).
"""

from __future__ import annotations

import numpy as np
import torch
from dataclasses import replace

from compactsim.harness.pipeline.advantages import grpo_advantages
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "row.advantage"
SCENARIO = "fault-finish-length-midway"  # K=1 recency: rollouts of 2 rows (cut at turn 3) and 4 rows


class Backend(ReferenceBackend):
    name = "per-trace-advantages"

    def materialize(self, plans, cfg):
        batch = super().materialize(plans, cfg)
        acfg = cfg.advantage_config()
        parents = batch.parent_indices.tolist()
        groups: dict[str, list[int]] = {}
        for r, p in enumerate(parents):
            if p >= 0:
                groups.setdefault(batch.logical[p].group_key, []).append(r)
        adv = batch.row_advantages.clone()
        for rows in groups.values():
            rewards = [batch.logical[parents[r]].reward for r in rows]
            raw, _, _ = grpo_advantages(rewards, leave_one_out=acfg.use_leave_one_out_baseline,
                                        normalize=acfg.normalize_rewards)
            for r, a in zip(rows, np.clip(raw, acfg.advantage_clip_low if acfg.advantage_clip_low is not None else -np.inf,
                                          acfg.advantage_clip_high if acfg.advantage_clip_high is not None else np.inf)):
                adv[r] = torch.where(batch.row_token_mask[r] != 0, torch.tensor(float(a), dtype=adv.dtype), adv[r])
        return replace(batch, row_advantages=adv)
