"""Broken backend: `mask_sample` is applied by zeroing the rows' advantage, so their KL term still trains.

NeMo-RL weights every token of the loss, KL term included, by `sample_mask` (semantics §4.2, §4.5):
a flagged sample leaves the loss entirely. This trainer keeps the normalisers and the logged
metrics of the reference (they are computed with the mask) but back-propagates a loss in which
the flagged rows only lost their advantage. Invisible at step 0 (zero KL gradient at the reference).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.loss import LossOutput
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState
from tests.quality._patching import loss_replaced

EXPECTED_CHECK = "train.gradient"
SCENARIO = "kl-mask-sample-steps"


def _mask_by_advantage(original: Callable[..., LossOutput]) -> Callable[..., LossOutput]:
    def loss(cfg: Any, **kwargs: Any) -> LossOutput:
        right = original(cfg, **kwargs)
        keep = kwargs["sample_mask"]
        real = kwargs["token_mask"].sum(-1) > 0
        bent = {**kwargs, "advantages": kwargs["advantages"] * keep[:, None].to(kwargs["advantages"].dtype),
                "sample_mask": torch.where(real, torch.ones_like(keep), keep)}
        return LossOutput(loss=original(cfg, **bent).loss, metrics=right.metrics)

    return loss


class Backend(ReferenceBackend):
    """Masks flagged samples through their advantage only."""

    name = "mask-sample-keeps-kl"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        with loss_replaced(_mask_by_advantage):
            return super().train_step(state, batch, cfg)
