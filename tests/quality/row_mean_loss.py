"""Broken backend: the loss is a mean per row, then a mean over rows (a rollout's row count becomes its weight)."""

from __future__ import annotations

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.loss import LossOutput
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState
from tests.quality._patching import local_counts, loss_replaced

EXPECTED_CHECK = "train.loss"
SCENARIO = "fault-finish-length-midway"  # K=1 recency: rollouts of 2 rows (cut at turn 3) and 4 rows


class Backend(ReferenceBackend):
    """With one row per micro-batch: each row normalised by its own tokens, then divided by the real row count."""

    name = "row-mean-loss"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        rows = max(batch.num_real_rows, 1)

        def wrap(original):
            def loss(cfg_, **kw):
                tokens, seqs = local_counts(kw)
                kw["global_valid_tokens"], kw["global_valid_seqs"] = max(tokens, 1.0), max(seqs, 1.0)
                out = original(cfg_, **kw)
                return LossOutput(out.loss / rows, {**out.metrics, "loss": out.metrics["loss"] / rows})
            return loss

        with loss_replaced(wrap):
            return super().train_step(state, batch, cfg)
