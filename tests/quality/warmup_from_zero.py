"""Broken backend: the LR warmup is Hugging Face's ``get_constant_schedule_with_warmup`` factor ``n / warmup`` after n
scheduler increments, where NeMo-RL's ``LinearLR`` warmup (and the run's ``LambdaLR``) gives ``(n + 1) / warmup``.

The HF schedule starts at a learning rate of exactly 0: the first optimizer step moves AdamW's moments but not one
weight, and every later warmup step trains at the rate of the step before it, reaching the full rate one step late.
A TRL port that keeps ``transformers``' scheduler helper ships it without a visible error; the step counts, the
gradient and the loss are all right.
"""

from __future__ import annotations

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "train.lr"
SCENARIO = "warmup-weight-decay-no-clip"


class _FromZero:
    """LR multiplier after `n` increments, as transformers' constant-with-warmup schedule computes it."""

    def __init__(self, warmup: int) -> None:
        self.warmup = warmup

    def __call__(self, n: int) -> float:
        return n / max(1, self.warmup) if n < self.warmup else 1.0


class Backend(ReferenceBackend):
    name = "warmup-from-zero"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        factor = _FromZero(cfg.policy.lr_warmup_steps)
        sched = state.scheduler
        sched.lr_lambdas = [factor for _ in state.optimizer.param_groups]  # the trainer's own schedule
        for group in state.optimizer.param_groups:
            group["lr"] = group["initial_lr"] * factor(sched.last_epoch)
        return super().train_step(state, batch, cfg)
