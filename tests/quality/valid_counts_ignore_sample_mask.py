"""Broken backend: reports `global_valid_toks`/`global_valid_seqs` without the sample mask (and padding as sequences).

The loss uses the right normaliser; the logged counts take every trainable token and every row,
as a metrics path that forgets `sample_mask` would (NeMo-RL: Σ token_mask[:, 1:]·sample_mask, §4.6).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from compactsim.harness.core import metrics as M
from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "train.metric"
SCENARIO = "layout-dp2-microbatch2-mask-sample"  # a mask_sample'd rollout and a padding row


class Backend(ReferenceBackend):
    name = "valid-counts-ignore-sample-mask"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        result = super().train_step(state, batch, cfg)
        counts = {M.GLOBAL_VALID_TOKENS: float(batch.row_token_mask[:, 1:].to(torch.float64).sum()),
                  M.GLOBAL_VALID_SEQS: float(batch.num_rows)}
        metrics = {**result.metrics, **counts}
        return replace(result, metrics=metrics, artifact=replace(result.artifact, metrics=metrics))
