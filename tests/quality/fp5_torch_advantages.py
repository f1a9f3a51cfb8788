"""A CORRECT backend (false-positive hunt 5): GRPO advantages computed in torch float64, NeMo-RL's way but two-pass.

Per group: leave-one-out baseline (Σr − r_i)/(n − 1) from the group sum, the unbiased std of the others by
`torch.std` (correction 1), equal rewards tested first (std 0, advantage 0, as README requires), division by
std + 1e-6 where std > 0, then `torch.clamp(min=low, max=high)`. Only reduction order differs from the reference's
`math.fsum`.
"""

from __future__ import annotations

import torch

from compactsim.harness.pipeline.advantages import (LogicalAdvantages, _reward, check_group_sizes,
                                                    check_unique_rollouts, rollout_sort_key)
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.materializer import prepare_trace_batch

SCENARIO = "rewards-beyond-ten"


def _group(r: torch.Tensor, loo: bool, normalize: bool):
    n = r.numel()
    if n <= 1:
        return torch.zeros_like(r), r.clone(), torch.zeros_like(r)
    base = torch.empty_like(r)
    std = torch.empty_like(r)
    total = r.sum()
    for i in range(n):
        others = torch.cat([r[:i], r[i + 1:]]) if loo else r
        if bool((others == others[0]).all()):
            base[i], std[i] = others[0], 0.0
            continue
        base[i] = (total - r[i]) / (n - 1) if loo else total / n
        std[i] = others.std(correction=1) if others.numel() > 1 else 0.0
    adv = r - base
    if normalize:
        adv = torch.where(std > 0, adv / (std + 1e-6), adv)
    return adv, base, std


class Backend(ReferenceBackend):
    name = "fp5-torch-advantages"

    def materialize(self, plans, cfg):
        ac = cfg.advantage_config()
        ordered = sorted((p.evidence for p in plans), key=rollout_sort_key)
        check_unique_rollouts(ordered)
        check_group_sizes(ordered, ac.num_generations_per_prompt)
        rewards = torch.tensor([_reward(e) for e in ordered], dtype=torch.float64)
        keys = [e.group_key for e in ordered]
        raw = torch.zeros_like(rewards)
        base = torch.zeros_like(rewards)
        std = torch.zeros_like(rewards)
        for key in dict.fromkeys(keys):
            idx = torch.tensor([i for i, k in enumerate(keys) if k == key])
            a, b, s = _group(rewards[idx], ac.use_leave_one_out_baseline, ac.normalize_rewards)
            raw[idx], base[idx], std[idx] = a, b, s
        adv = raw
        if ac.advantage_clip_low is not None or ac.advantage_clip_high is not None:
            adv = torch.clamp(raw, min=ac.advantage_clip_low, max=ac.advantage_clip_high)
        logical = LogicalAdvantages(
            rollout_ids=tuple(e.rollout_id for e in ordered), group_keys=tuple(keys),
            rewards=tuple(float(x) for x in rewards), baselines=tuple(float(x) for x in base),
            stds=tuple(float(x) for x in std), advantages=tuple(float(x) for x in adv),
            mask_sample=tuple(bool(e.mask_sample) for e in ordered),
            unclipped_advantages=tuple(float(x) for x in raw))
        return prepare_trace_batch(plans, None, logical, cfg.materialize_config())
