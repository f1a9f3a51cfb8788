"""Broken backend: importance weights per sequence (exp of the row's summed log-ratio) instead of per token."""

from __future__ import annotations

import torch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState
from tests.quality._patching import loss_replaced

EXPECTED_CHECK = "train.loss"
SCENARIO = "importance-sampling-correction"


class Backend(ReferenceBackend):
    """Rewrites the behaviour logprobs the loss sees so every token of a row gets the row's sequence weight."""

    name = "sequence-level-importance-weights"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        def wrap(original):
            def loss(cfg_, **kw):
                prev, gen, mask = kw["prev_logprobs"], kw["generation_logprobs"], kw["token_mask"].to(kw["prev_logprobs"].dtype)
                log_w = ((prev - gen) * mask).sum(-1, keepdim=True)  # (B, 1): the sequence's log weight
                kw["generation_logprobs"] = torch.where(mask != 0, prev - log_w, gen)
                return original(cfg_, **kw)
            return loss

        with loss_replaced(wrap):
            return super().train_step(state, batch, cfg)
