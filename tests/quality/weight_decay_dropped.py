"""Broken backend: the AdamW is rebuilt without weight decay (a config key that never reached the optimizer)."""

from __future__ import annotations

import torch

from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.update"
SCENARIO = "warmup-weight-decay-no-clip"


class Backend(ReferenceBackend):
    name = "weight-decay-dropped"

    def train_step(self, state, batch, cfg):
        old = state.optimizer
        if old.param_groups[0]["weight_decay"] != 0.0 and not old.state:
            group = old.param_groups[0]
            opt = torch.optim.AdamW(state.policy.parameters(), lr=group["initial_lr"], betas=group["betas"],
                                    eps=group["eps"], weight_decay=0.0, foreach=False)
            state.optimizer = opt
            state.scheduler = torch.optim.lr_scheduler.LambdaLR(opt, state.scheduler.lr_lambdas[0])
        return super().train_step(state, batch, cfg)
