"""A CORRECT float32 backend: GRPO advantages computed in float32, as NeMo-RL's reward tensors are.

nemo-rl-semantics §3.2-3.3 with float32 `rewards`: leave-one-out baseline and unbiased std in float32, then
(r - b) / (std + 1e-6), then `grpo.advantage_clip_low/high` as NeMo-RL's `_clip_grpo_advantages`. Off from the
float64 oracle by float32 rounding (~1e-7 relative), inside the float32
tolerance for advantages (atol and rtol 1e-6), so a float32 run must pass it; in a float64 run the table's
1e-12 makes the same code a `row.advantage` finding, as it should.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from compactsim.harness.pipeline.advantages import clip_advantages, compute_logical_advantages
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.materializer import prepare_trace_batch

SCENARIO = "float32-graded-group"


def _grpo_float32(rewards: list[float], *, leave_one_out: bool, normalize: bool) -> list[float]:
    r = torch.tensor(rewards, dtype=torch.float32)
    n = r.numel()
    if n <= 1:
        return [0.0] * n
    M = torch.ones(n, n, dtype=torch.float32) - (torch.eye(n, dtype=torch.float32) if leave_one_out else 0)
    m = float(n - int(leave_one_out))
    b = M @ r / m
    sq = M @ (r * r) / m
    std = ((sq - b * b) * m / (m - 1)).clamp(min=0).sqrt().nan_to_num(0) if m > 1 else torch.zeros_like(r)
    adv = r - b
    if normalize:
        adv = torch.where(std > 0, adv / (std + 1e-6), adv)
    return [float(a) for a in adv]


class Backend(ReferenceBackend):
    name = "correct-float32-advantages"

    def materialize(self, plans, cfg):
        acfg = cfg.advantage_config()
        ref = compute_logical_advantages([p.evidence for p in plans], acfg)
        adv = list(ref.advantages)
        groups: dict[str, list[int]] = {}
        for k, key in enumerate(ref.group_keys):
            groups.setdefault(key, []).append(k)
        for idx in groups.values():
            values = _grpo_float32([ref.rewards[k] for k in idx], leave_one_out=acfg.use_leave_one_out_baseline,
                                   normalize=acfg.normalize_rewards)
            for k, a in zip(idx, values):
                adv[k] = a
        clipped = clip_advantages(np.asarray(adv), acfg.advantage_clip_low, acfg.advantage_clip_high)
        logical = replace(ref, advantages=tuple(float(a) for a in clipped), unclipped_advantages=tuple(adv))
        return prepare_trace_batch(plans, None, logical, cfg.materialize_config())
