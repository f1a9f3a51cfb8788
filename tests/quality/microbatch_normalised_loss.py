"""Broken backend: each micro-batch's loss is divided by its own token count (the gradient-accumulation bug)."""

from __future__ import annotations

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState
from tests.quality._patching import local_counts, loss_replaced

EXPECTED_CHECK = "train.grad_norm"
SCENARIO = "layout-dp2-microbatch2-mask-sample"  # two micro-batches of different token counts


class Backend(ReferenceBackend):
    """Normalises by the micro-batch's valid tokens instead of the whole logical batch's."""

    name = "microbatch-normalised-loss"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        def wrap(original):
            def loss(cfg_, **kw):
                tokens, seqs = local_counts(kw)
                kw["global_valid_tokens"], kw["global_valid_seqs"] = max(tokens, 1.0), max(seqs, 1.0)
                return original(cfg_, **kw)
            return loss

        with loss_replaced(wrap):
            return super().train_step(state, batch, cfg)
