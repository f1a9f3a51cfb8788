"""Broken backend: each step starts again from the weights of step 0 (a stale offload buffer reloaded).

Every step on its own is a correct AdamW step from the weights it was handed, so only a check that
a step starts where the previous one ended can see that training never advances.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "train.continuity"
SCENARIO = "warmup-weight-decay-no-clip"


class Backend(ReferenceBackend):
    """Copies the weights once, at the first step, and writes them back while preparing every later batch."""

    name = "stale-weights-reloaded"

    def __init__(self) -> None:
        self._state: TrainState | None = None
        self._first: list[torch.Tensor] | None = None

    def materialize(self, plans: Sequence[Any], cfg: TrainerConfig) -> TraceBatch:
        if self._state is not None and self._first is not None:
            with torch.no_grad():
                for p, old in zip(self._state.policy.parameters(), self._first, strict=True):
                    p.copy_(old)
        return super().materialize(plans, cfg)

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        if self._first is None:
            self._first = [p.detach().clone() for p in state.policy.parameters()]
        self._state = state
        return super().train_step(state, batch, cfg)
