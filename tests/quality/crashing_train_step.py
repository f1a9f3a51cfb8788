"""Broken backend: `train_step` raises an exception no contract names (a crash, not a refusal)."""

from __future__ import annotations

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "backend.error"
SCENARIO = "no-compaction"


class Backend(ReferenceBackend):
    name = "crashing-train-step"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
