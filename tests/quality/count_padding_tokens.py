"""Broken backend: `total_num_tokens` counts padded positions (right padding and padding rows) as tokens."""

from __future__ import annotations

from dataclasses import replace

from compactsim.harness.core import metrics as M
from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "metric.exact"
SCENARIO = "layout-dp2-microbatch2-mask-sample"  # padding rows and right padding in two-row micro-batches


class Backend(ReferenceBackend):
    """Reports rows × padded width as the token count (NeMo-RL counts only real tokens)."""

    name = "count-padding-tokens"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        result = super().train_step(state, batch, cfg)
        metrics = {**result.metrics, M.TOTAL_NUM_TOKENS: batch.num_rows * batch.seq_len}
        return replace(result, metrics=metrics, artifact=replace(result.artifact, metrics=metrics))
