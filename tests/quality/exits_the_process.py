"""Broken backend: `train_step` calls `sys.exit(1)`, as a worker's failure handler might; a finding, not a dead suite."""

from __future__ import annotations

import sys

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "backend.error"
SCENARIO = "no-compaction"


class Backend(ReferenceBackend):
    name = "exits-the-process"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        sys.exit(1)
