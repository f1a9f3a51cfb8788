"""Broken backend: a static loss scale (×1024, fp16-style) never undone before the step, in an AdamW that keeps
its state under its own keys (`state1`/`state2`, as bitsandbytes does) instead of torch's `exp_avg`/`exp_avg_sq`.

The optimizer applies 1024× the clipped gradient; loss, grad_norm and lr are reported right, and Adam
divides the scale out of the update except through ε (in effect ε/1024), which float32's update
tolerance does not resolve. With torch's state keys `train.gradient` reads the applied gradient back
and names the 1024×; here it cannot read it, and says so (`train.gradient`) instead of passing the step.
"""

from __future__ import annotations

from unittest.mock import patch

import torch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline import trainer as trainer_module
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState
from tests.quality._adamw import adamw_step

EXPECTED_CHECK = "train.gradient"
SCENARIO = "float32-training"
SCALE = 1024.0


class OwnKeyAdamW(torch.optim.Optimizer):
    """torch.optim.AdamW's decoupled update, its state under `step`, `state1`, `state2`."""

    def __init__(self, params, lr: float, betas: tuple[float, float], eps: float, weight_decay: float) -> None:
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    def step(self, closure=None):  # noqa: ANN001, ANN201 - torch's signature
        adamw_step(self, keys=("state1", "state2"))


def _scaled_clip(params, max_norm):  # noqa: ANN001, ANN202 - the reference's private signature
    """Scale the gradients by the loss scale, compute the norm and clip on the unscaled view, never unscale."""
    grads = [p.grad for p in params if p.grad is not None]
    for g in grads:
        g.mul_(SCALE)
    norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.to(torch.float64)) / SCALE for g in grads])))
    if max_norm is not None:
        coef = min(1.0, max_norm / (norm + 1e-6))
        for g in grads:
            g.mul_(coef)
    return norm


class Backend(ReferenceBackend):
    """Swaps in `OwnKeyAdamW` (same hyperparameters and schedule) on the first step, then steps with the scale kept."""

    name = "loss-scale-kept-in-own-keyed-adamw"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        if not isinstance(state.optimizer, OwnKeyAdamW):
            g0 = state.optimizer.param_groups[0]
            optimizer = OwnKeyAdamW(state.policy.parameters(), lr=g0["lr"], betas=g0["betas"], eps=g0["eps"],
                                    weight_decay=g0["weight_decay"])
            scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, state.scheduler.lr_lambdas[0])
            scheduler.load_state_dict(state.scheduler.state_dict())
            optimizer.param_groups[0]["lr"] = g0["lr"]
            state.optimizer, state.scheduler = optimizer, scheduler
        with patch.object(trainer_module, "_clip_grad_norm", _scaled_clip):
            return super().train_step(state, batch, cfg)
