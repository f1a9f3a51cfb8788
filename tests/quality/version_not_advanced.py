"""Broken backend: `train_step` trains but leaves `state.version` where it was.

The runner would push the new weights as a version the generation server never reaches; the step
is named as the backend's malformed result instead of surfacing as the push's mismatch.
"""

from __future__ import annotations

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "backend.error"
SCENARIO = "policy-no-compaction"


class Backend(ReferenceBackend):
    name = "version-not-advanced"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        result = super().train_step(state, batch, cfg)
        state.version -= 1
        return result
