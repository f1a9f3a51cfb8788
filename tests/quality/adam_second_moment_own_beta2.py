"""Broken backend: a hand-written AdamW that keeps torch's state keys but advances its second moment with β2 = 0.95
while its param groups say 0.999 (a constant hard-coded in the update, the group's value never read).

Bias correction makes Adam's first update independent of β2, so on a one-step scenario the weights, the
first moment and the group's betas are all right; a resumed run would divide every later update by the
wrong second moment. Only the second moment shows it: `train.continuity` (it did not advance with the
group's β2 and the gradient the first moment applied).
"""

from __future__ import annotations

import functools
import math

import torch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "train.continuity"
SCENARIO = "no-compaction"
HARD_CODED_BETA2 = 0.95


@torch.no_grad()
def hard_coded_beta2_step(optimizer: torch.optim.Optimizer) -> None:
    """torch's AdamW state layout (`step`, `exp_avg`, `exp_avg_sq`) and decoupled decay, β2 taken from a constant."""
    for group in optimizer.param_groups:
        b1 = group["betas"][0]
        for p in group["params"]:
            if p.grad is None:
                continue
            st = optimizer.state[p]
            if not st:
                st.update(step=torch.tensor(0.0), exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p))
            st["step"] += 1
            t = float(st["step"])
            p.mul_(1 - group["lr"] * group["weight_decay"])
            st["exp_avg"].lerp_(p.grad, 1 - b1)
            st["exp_avg_sq"].mul_(HARD_CODED_BETA2).addcmul_(p.grad, p.grad, value=1 - HARD_CODED_BETA2)
            denom = (st["exp_avg_sq"].sqrt() / math.sqrt(1 - HARD_CODED_BETA2**t)).add_(group["eps"])
            p.addcdiv_(st["exp_avg"], denom, value=-group["lr"] / (1 - b1**t))


class Backend(ReferenceBackend):
    """Runs the reference step with its AdamW stepping by `hard_coded_beta2_step` (same groups, same state).

    Set on the instance: the LR scheduler has already wrapped the optimizer's bound `step` there.
    """

    name = "adam-second-moment-own-beta2"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        state.optimizer.step = functools.partial(hard_coded_beta2_step, state.optimizer)
        return super().train_step(state, batch, cfg)
