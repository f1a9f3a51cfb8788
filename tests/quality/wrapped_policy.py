"""A CORRECT backend that wraps the policy DDP-style (parameter names gain a ``module.`` prefix): it must pass."""

from __future__ import annotations

from typing import Any

from torch import nn

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

SCENARIO = "warmup-weight-decay-no-clip"  # three steps with warmup and decay, a quarter the cost of scripted-three-steps


class Wrapper(nn.Module):
    """What DDP/FSDP do to names: the model becomes `.module`; calls and attributes pass through."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.module, name)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)


class Backend(ReferenceBackend):
    name = "wrapped-policy"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        if not isinstance(state.policy, Wrapper):
            state.policy = Wrapper(state.policy)
        return super().train_step(state, batch, cfg)
