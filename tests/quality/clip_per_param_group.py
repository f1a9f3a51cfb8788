"""Broken backend: gradient clipping done one optimizer param group at a time
(``for g in optimizer.param_groups: clip_grad_norm_(g["params"], max_norm)``), in a trainer that builds
Megatron's decay / no-decay groups (biases and 1-D parameters at lambda = 0, which the audit accepts) only when
weight decay is on: "without decay one group is enough".

With one param group, per-group clipping is the global clip. With two, each group is scaled by its own norm, so the
bias/norm group (a small share of the norm) is clipped less, or not at all. The reported ``grad_norm`` is the
whole model's, as it should be. In the catalogue weight decay never meets a clip that binds.
"""

from __future__ import annotations

from unittest.mock import patch

import torch

from compactsim.harness.pipeline import trainer as trainer_module
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.gradient"
SCENARIO = "weight-decay-clip-binds"

_clip_grad_norm = trainer_module._clip_grad_norm


def megatron_groups(policy, weight_decay):
    decay, no_decay = [], []
    for name, p in policy.named_parameters():
        (no_decay if name.endswith(".bias") or p.dim() == 1 else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


class Backend(ReferenceBackend):
    name = "clip-per-param-group"

    def train_step(self, state, batch, cfg):
        old = state.optimizer
        if cfg.policy.weight_decay > 0 and len(old.param_groups) == 1 and not old.state:
            group = old.param_groups[0]
            opt = torch.optim.AdamW(megatron_groups(state.policy, group["weight_decay"]), lr=group["initial_lr"],
                                    betas=group["betas"], eps=group["eps"], foreach=False)
            state.optimizer = opt
            state.scheduler = torch.optim.lr_scheduler.LambdaLR(opt, state.scheduler.lr_lambdas[0])
        optimizer = state.optimizer

        def per_group_clip(params, max_norm):
            if max_norm is None:
                return _clip_grad_norm(params, None)
            total = _clip_grad_norm(params, None)  # the whole model's norm, reported
            for group in optimizer.param_groups:
                torch.nn.utils.clip_grad_norm_([p for p in group["params"] if p.grad is not None], max_norm,
                                               foreach=False)
            return total

        with patch.object(trainer_module, "_clip_grad_norm", per_group_clip):
            return super().train_step(state, batch, cfg)
