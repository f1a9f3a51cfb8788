"""Broken backend: after the LR warmup, torch's default `ConstantLR` (factor 1/3 for 5 increments) instead of 1.

A schedule built as SequentialLR(warmup, ConstantLR(optimizer)) trains at a third of the learning rate for the
five increments after warmup; the reference is linear warmup over `lr_warmup_steps` increments, then 1
(`trainer._WarmupFactor`). Warmup itself is right, so a run that never leaves it sees no difference.
"""

from __future__ import annotations

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState, _WarmupFactor

EXPECTED_CHECK = "train.lr"
SCENARIO = "warmup-past-its-end"


class _ConstantLRThirdAfterWarmup(_WarmupFactor):
    """Linear warmup, then 1/3 for 5 increments (torch's `ConstantLR` defaults), then 1."""

    def __call__(self, n: int) -> float:
        if self.warmup == 0 or n < self.warmup:
            return super().__call__(n)
        return 1.0 / 3.0 if n - self.warmup < 5 else 1.0


class Backend(ReferenceBackend):
    """Swaps the scheduler's LR multiplier for the broken one before its first step."""

    name = "warmup-then-constant-lr-third"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        lambdas = state.scheduler.lr_lambdas
        if not isinstance(lambdas[0], _ConstantLRThirdAfterWarmup):
            lambdas[0] = _ConstantLRThirdAfterWarmup(cfg.policy.lr_warmup_steps)
        return super().train_step(state, batch, cfg)
