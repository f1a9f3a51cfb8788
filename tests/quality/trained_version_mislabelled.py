"""Broken backend: the step labels the weights it trained with the version they become (off by one).

The gradient came from version v's weights; `trained_version` and `train/policy_version` say v + 1,
so a user lining up generation and training versions (staleness, importance weights) is misled.
"""

from __future__ import annotations

from dataclasses import replace

from compactsim.harness.core import metrics as M
from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "backend.error"
SCENARIO = "warmup-weight-decay-no-clip"


class Backend(ReferenceBackend):
    name = "trained-version-mislabelled"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        result = super().train_step(state, batch, cfg)
        metrics = {**result.metrics, M.TRAINED_POLICY_VERSION: result.new_version}
        return replace(result, trained_version=result.new_version, metrics=metrics,
                       artifact=replace(result.artifact, metrics=metrics))
