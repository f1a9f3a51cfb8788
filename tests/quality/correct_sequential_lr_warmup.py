"""A CORRECT backend: NeMo-RL's scheduler shape instead of a LambdaLR.

NeMo-RL's DTensor configs build the warmup as `SequentialLR([LinearLR(start_factor, 1.0, total_iters),
ConstantLR(factor=1.0)], milestones=[total_iters])`. With start_factor 1/W and total_iters W-1 the
LinearLR's factor after n increments is 1/W + (1 - 1/W)·n/(W-1) = (n+1)/W, the reference's
linear warmup, then 1: the same rates (LinearLR computes them recursively, so within rounding).
The backend swaps the handed scheduler for that one before its first step; the audit must pass it.
"""

from __future__ import annotations

from torch.optim.lr_scheduler import ConstantLR, LinearLR, SequentialLR

from compactsim.harness.pipeline.backend import ReferenceBackend

SCENARIO = "warmup-past-its-end"


class Backend(ReferenceBackend):
    name = "correct-sequential-lr-warmup"

    def train_step(self, state, batch, cfg):
        warmup = cfg.policy.lr_warmup_steps
        if warmup >= 2 and not isinstance(state.scheduler, SequentialLR):
            assert state.scheduler.last_epoch == 0, "swapped before the first step only"
            opt = state.optimizer
            for group in opt.param_groups:  # back to the base rate the schedule scales
                group["lr"] = group["initial_lr"]
            del opt.param_groups[0]["initial_lr"]
            linear = LinearLR(opt, start_factor=1.0 / warmup, end_factor=1.0, total_iters=warmup - 1)
            constant = ConstantLR(opt, factor=1.0, total_iters=0)
            state.scheduler = SequentialLR(opt, [linear, constant], milestones=[warmup - 1])
        return super().train_step(state, batch, cfg)
