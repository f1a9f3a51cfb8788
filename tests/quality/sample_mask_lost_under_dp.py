"""Broken backend: under dp_size > 1 the sharded micro-batches lose `sample_mask` (it defaults to ones).

Rows of `mask_sample` rollouts are then trained on every rank, though their loss weight must be 0; NeMo-RL's loss
weights every token by token_mask[:, 1:]·sample_mask on each micro-batch (§4.6). The global normalisers are still
counted on the unsharded batch, raised only where the unmasked micro-batch's own count exceeds them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.loss import LossConfig, LossOutput
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState
from tests.quality._patching import loss_replaced

EXPECTED_CHECK = "train.loss"
SCENARIO = "layout-dp2-microbatch2-mask-sample"


class Backend(ReferenceBackend):
    """Hands every micro-batch a sample mask of ones whenever there is more than one rank."""

    name = "sample-mask-lost-under-dp"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        if batch.dp_size == 1:
            return super().train_step(state, batch, cfg)

        def wrap(original: Callable[..., LossOutput]) -> Callable[..., LossOutput]:
            def loss(cfg_: LossConfig, **kw: Any) -> LossOutput:
                kw["sample_mask"] = torch.ones_like(kw["sample_mask"])
                trainable = kw["token_mask"][:, 1:].to(torch.float64)
                kw["global_valid_tokens"] = max(float(kw["global_valid_tokens"]), float(trainable.sum()))
                kw["global_valid_seqs"] = max(float(kw["global_valid_seqs"]), float(trainable.shape[0]))
                return original(cfg_, **kw)
            return loss

        with loss_replaced(wrap):
            return super().train_step(state, batch, cfg)
