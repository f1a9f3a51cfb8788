"""Broken backend: the LR scheduler steps before the optimizer, so each update uses the next step's learning rate.

A common ordering slip (`scheduler.step(); optimizer.step()`). The counts stay right (one increment,
one update per logical batch) and the param groups hold the schedule's rate when the step starts, so
reading the rate there says nothing; during warmup the update itself moves the weights at the next
increment's rate, which the harness reads back from the weights and AdamW's moments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from unittest.mock import patch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "train.lr"
SCENARIO = "warmup-weight-decay-no-clip"


class Backend(ReferenceBackend):
    """The reference step with its scheduler increment moved in front of `optimizer.step()`."""

    name = "scheduler-before-optimizer"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        scheduler_step: Callable[..., Any] = state.scheduler.step
        optimizer_step: Callable[..., Any] = state.optimizer.step

        def step_scheduler_first(*args: Any, **kwargs: Any) -> Any:
            scheduler_step()
            return optimizer_step(*args, **kwargs)

        with patch.object(state.optimizer, "step", step_scheduler_first), patch.object(state.scheduler, "step", lambda: None):
            return super().train_step(state, batch, cfg)
