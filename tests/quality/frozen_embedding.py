"""Broken backend: the token embedding is frozen (`requires_grad_(False)`, a "freeze embeddings" switch left on),
so its `.grad` stays None and AdamW skips it although every row reaches it."""

from __future__ import annotations

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "counts.optimizer"
SCENARIO = "image-compaction-k2-rolling"


class Backend(ReferenceBackend):
    name = "frozen-embedding"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        state.policy.tok_emb.weight.requires_grad_(False)
        try:
            return super().train_step(state, batch, cfg)
        finally:
            state.policy.tok_emb.weight.requires_grad_(True)
