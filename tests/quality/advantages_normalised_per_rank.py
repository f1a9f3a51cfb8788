"""Broken backend: each data-parallel rank recomputes the GRPO advantages from the rollouts whose rows it holds, so a
group's baseline and std are taken over the part of the group that landed on the rank.

Advantage normalisation placed after the batch is sharded (in the training worker, where the rewards travel with the
rows) instead of on the driver's whole logical batch. A rank holding one rollout of a group gives it advantage 0; a
rank holding two of three baselines each against the other alone. The batch handed to the trainer (and its artifact)
carries the driver's right advantages, and at dp_size 1, or whenever every group sits on one rank, the two agree.
"""

from __future__ import annotations

from unittest.mock import patch

import torch

from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.advantages import clip_advantages, grpo_advantages
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.gradient"
SCENARIO = "layout-dp2-microbatch2-mask-sample"


def _rank_local_advantages(batch, cfg) -> torch.Tensor:
    """(R, S) advantages each rank computes from the rollouts its own rows belong to."""
    acfg = cfg.advantage_config()
    adv = batch.row_advantages.clone()
    parents = batch.parent_indices.tolist()
    for rank in range(batch.dp_size):
        rows = [r for r in batch.rank_rows(rank) if parents[r] >= 0]
        local = sorted({parents[r] for r in rows})  # the rollouts this rank sees
        groups: dict[str, list[int]] = {}
        for i in local:
            groups.setdefault(batch.logical[i].group_key, []).append(i)
        value: dict[int, float] = {}
        for members in groups.values():
            raw, _, _ = grpo_advantages([batch.logical[i].reward for i in members],
                                        leave_one_out=acfg.use_leave_one_out_baseline, normalize=acfg.normalize_rewards)
            clipped = clip_advantages(raw, acfg.advantage_clip_low, acfg.advantage_clip_high)
            value.update({i: float(a) for i, a in zip(members, clipped)})
        for r in rows:
            adv[r] = torch.where(batch.row_token_mask[r] != 0, torch.tensor(value[parents[r]], dtype=adv.dtype), adv[r])
    return adv


class Backend(ReferenceBackend):
    name = "advantages-normalised-per-rank"

    def train_step(self, state, batch, cfg):
        local = _rank_local_advantages(batch, cfg)
        original = T._slice

        def sliced(batch_, rows, row_images, row_routes, device):
            mb = original(batch_, rows, row_images, row_routes, device)
            adv = local[rows.start:rows.stop, : mb.width].to(device)
            return T._Microbatch(**{**{f: getattr(mb, f) for f in mb.__slots__}, "advantages": adv})

        with patch.object(T, "_slice", sliced):
            return super().train_step(state, batch, cfg)
