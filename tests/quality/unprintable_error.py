"""Broken backend: raises an exception whose own `__str__` fails (a remote error proxy that lost its payload)."""

from __future__ import annotations

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "backend.error"
SCENARIO = "no-compaction"


class RemoteError(Exception):
    def __str__(self) -> str:
        raise TypeError("the remote payload is gone")


class Backend(ReferenceBackend):
    name = "unprintable-error"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        raise RemoteError()
