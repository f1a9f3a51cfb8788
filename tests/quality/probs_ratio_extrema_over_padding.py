"""Broken backend: `probs_ratio[_clamped]_min/max` over every position of the micro-batch, untrained ones as 0.

The ratio is masked by multiplication (``r·m``) and the extremum taken over the whole ``[B, S-1]``
tensor, so prompt and padding positions contribute 0: the logged minimum is 0 however close to 1
every trained ratio is. NeMo-RL takes the extrema over the ``m ≠ 0`` positions only (§4.6).
Training is the reference's.
"""

from __future__ import annotations

import torch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState
from tests.quality._patching import loss_replaced, next_token_frame

EXPECTED_CHECK = "train.metric"
EXPECTED_KEY = "probs_ratio_min"
SCENARIO = "no-compaction"  # every row has prompt positions, so r·m's minimum is 0


class Backend(ReferenceBackend):
    name = "probs-ratio-extrema-over-padding"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        def wrap(original):
            def loss(cfg_, **kw):
                out = original(cfg_, **kw)
                curr, prev, mask = next_token_frame(kw)
                ratio = torch.where(mask != 0, torch.exp(curr - prev), torch.zeros_like(curr))  # r·m: 0 off the mask
                clamped = torch.where(mask != 0, ratio.clamp(1 - cfg_.ratio_clip_min, 1 + cfg_.ratio_clip_max), ratio)
                out.metrics.update({
                    "probs_ratio_min": ratio.min().item(), "probs_ratio_max": ratio.max().item(),
                    "probs_ratio_clamped_min": clamped.min().item(), "probs_ratio_clamped_max": clamped.max().item(),
                })
                return out
            return loss

        with loss_replaced(wrap):
            return super().train_step(state, batch, cfg)
