"""Broken backend: `train_step` returns a result without a step artifact."""

from __future__ import annotations

from dataclasses import replace

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "backend.error"
SCENARIO = "no-compaction"


class Backend(ReferenceBackend):
    name = "malformed-result"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        return replace(super().train_step(state, batch, cfg), artifact=None)
