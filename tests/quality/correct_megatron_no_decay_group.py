"""A CORRECT backend: Megatron-core's param groups. At its first step it rebuilds the AdamW with biases and 1-D
parameters (norms) in a group without weight decay, as Megatron's default `_get_param_groups` does and NeMo-RL's
Megatron path runs the same config; the LR schedule is rebuilt over it. The audit must pass it."""

from __future__ import annotations

import torch

from compactsim.harness.pipeline.backend import ReferenceBackend

SCENARIO = "warmup-weight-decay-no-clip"


def megatron_groups(policy: torch.nn.Module, weight_decay: float) -> list[dict]:
    decay, no_decay = [], []
    for name, p in policy.named_parameters():
        (no_decay if name.endswith(".bias") or p.dim() == 1 else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


class Backend(ReferenceBackend):
    name = "correct-megatron_no_decay_group"

    def train_step(self, state, batch, cfg):
        old = state.optimizer
        if len(old.param_groups) == 1 and not old.state:  # before the first update: nothing to carry over
            group = old.param_groups[0]
            opt = torch.optim.AdamW(megatron_groups(state.policy, group["weight_decay"]), lr=group["initial_lr"],
                                    betas=group["betas"], eps=group["eps"], foreach=False)
            state.optimizer = opt
            state.scheduler = torch.optim.lr_scheduler.LambdaLR(opt, state.scheduler.lr_lambdas[0])
        return super().train_step(state, batch, cfg)
