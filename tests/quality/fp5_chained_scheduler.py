"""A CORRECT backend (false-positive hunt 5): the warmup as a `ChainedScheduler` of a linear warmup and a decay of 1.

Trainers that compose "warmup then decay" from torch's schedulers (`ChainedScheduler([LinearLR, ExponentialLR])`)
and configure no decay (gamma 1.0) train at NeMo-RL's rates: LinearLR(start_factor=1/W, total_iters=W − 1) gives
(e + 1)/W up to epoch W − 1 and 1 after. Installed before the first step (the group's rate reset to its initial
rate so that LinearLR's own first step applies 1/W once), stepped once per optimizer step. A `ChainedScheduler` has
no `last_epoch` of its own: the harness reads the count its members share (it was a `backend.error` before).
"""

from __future__ import annotations

import torch

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality.fp5_step import Opts, train_step

SCENARIO = "warmup-two-prompt-groups"


class Backend(ReferenceBackend):
    name = "fp5-chained-scheduler"

    def train_step(self, state, batch, cfg):
        sched = state.scheduler
        w = cfg.policy.lr_warmup_steps
        if isinstance(sched, torch.optim.lr_scheduler.LambdaLR) and sched.last_epoch == 0 and w >= 2:
            opt = state.optimizer
            for g in opt.param_groups:
                g["lr"] = g["initial_lr"]
            warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0 / w, end_factor=1.0, total_iters=w - 1)
            decay = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=1.0)
            state.scheduler = torch.optim.lr_scheduler.ChainedScheduler([warm, decay], optimizer=opt)
        return train_step(state, batch, cfg, Opts())

