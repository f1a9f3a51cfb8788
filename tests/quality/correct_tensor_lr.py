"""A CORRECT backend: AdamW with the learning rate held as a 0-d TENSOR (torch supports Tensor lr; schedulers
then fill_ it in place), as trainers that compile or capture the optimizer step do. Same rates, same update.
Rebuilt before the first update with the same hyperparameters; the LambdaLR over it is the same schedule."""

from __future__ import annotations

import torch

from compactsim.harness.pipeline.backend import ReferenceBackend

SCENARIO = "warmup-weight-decay-no-clip"


class Backend(ReferenceBackend):
    name = "correct-tensor-lr"

    def train_step(self, state, batch, cfg):
        old = state.optimizer
        if not isinstance(old.param_groups[0]["lr"], torch.Tensor) and not old.state:
            g = old.param_groups[0]
            lr = torch.tensor(float(g["initial_lr"]), dtype=torch.float64)
            opt = torch.optim.AdamW(state.policy.parameters(), lr=lr, betas=g["betas"], eps=g["eps"],
                                    weight_decay=g["weight_decay"], foreach=False)
            state.optimizer = opt
            state.scheduler = torch.optim.lr_scheduler.LambdaLR(opt, state.scheduler.lr_lambdas[0])
        return super().train_step(state, batch, cfg)
