"""A CORRECT backend combining legitimate optimizer-object and accumulation rewrites at once: before the first
update the AdamW is rebuilt as torch.optim.Adam(decoupled_weight_decay=True) with one param group per parameter
(identical hyperparameters) and a 0-d tensor learning rate, LambdaLR rebuilt over it; gradients by
torch.autograd.grad into separate per-rank buffers, rows dealt round-robin to the dp ranks, zero_grad(set_to_none=False).
"""

from __future__ import annotations

import torch

from tests.quality.correct_own_step import Backend as _Own, Opts

SCENARIO = "warmup-weight-decay-no-clip"


class Backend(_Own):
    name = "correct-combo-optimizer"
    opts = Opts(layout="round_robin", grad="autograd_grad", zero_set_to_none=False)

    def train_step(self, state, batch, cfg):
        old = state.optimizer
        if isinstance(old, torch.optim.AdamW) and not old.state:
            g = old.param_groups[0]
            lr = torch.tensor(float(g["initial_lr"]), dtype=torch.float64)
            groups = [{"params": [p], "weight_decay": g["weight_decay"]} for p in state.policy.parameters()]
            opt = torch.optim.Adam(groups, lr=lr, betas=g["betas"], eps=g["eps"], decoupled_weight_decay=True,
                                   foreach=False)
            state.optimizer = opt
            state.scheduler = torch.optim.lr_scheduler.LambdaLR(opt, state.scheduler.lr_lambdas[0])
        return super().train_step(state, batch, cfg)
