"""Broken backend (misreporting): ``advantages/mean``, ``advantages/min`` and ``advantages/max`` are taken over the
positions the loss trains (``token_mask · sample_mask``), so a rollout flagged ``mask_sample`` leaves them.

NeMo-RL computes them over ``token_loss_mask == 1`` positions, ignoring ``sample_mask`` (nemo-rl-semantics §3.7:
"overwritten at 3439 by the mean over positions where `token_loss_mask == 1` (ignoring `sample_mask`) ... `advantages/max`
and `advantages/min` use the same mask"; README: "`sample_mask` ignored (so `mask_sample` rollouts count)"). A masked
rollout still has its advantage — it enters the baseline — and the dashboards keep it.
"""

from __future__ import annotations

import torch

from compactsim.harness.core import metrics as M
from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._patching import with_metrics

EXPECTED_CHECK = "metric.exact"
SCENARIO = "layout-dp2-microbatch2-mask-sample"  # rollout 1 of (1, 0, 1) is mask_sample'd


class Backend(ReferenceBackend):
    name = "advantages-stats-over-sample-mask"

    def train_step(self, state, batch, cfg):
        result = super().train_step(state, batch, cfg)
        mask = batch.row_token_mask.to(torch.float64) * batch.row_sample_mask.to(torch.float64)[:, None]
        on = mask > 0
        adv = batch.row_advantages.to(torch.float64)
        n = int(on.sum())
        stats = {M.ADVANTAGES_MEAN: float((adv * mask).sum() / n) if n else 0.0,
                 M.ADVANTAGES_MIN: float(adv[on].min()) if n else 0.0,
                 M.ADVANTAGES_MAX: float(adv[on].max()) if n else 0.0}
        return with_metrics(result, stats)
