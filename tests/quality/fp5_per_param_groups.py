"""A CORRECT backend (false-positive hunt 5): AdamW rebuilt with one param group per parameter.

Layer-wise learning-rate decay code (BEiT/ELECTRA-style LLRD, several RLHF trainers' `get_optimizer_grouped_parameters`)
builds one group per named parameter; with a decay factor of 1.0 every group holds the same lr, betas, eps and
weight decay, so the update is AdamW(model.parameters()) exactly. The moments and step counters are carried over
(the same state tensors), and the warmup `LambdaLR` is rebuilt over the new optimizer at the current epoch.
"""

from __future__ import annotations

import torch

from compactsim.harness.pipeline.backend import ReferenceBackend

SCENARIO = "layout-dp2-kl-steps-clip-binds"


class Backend(ReferenceBackend):
    name = "fp5-per-param-groups"

    def train_step(self, state, batch, cfg):
        opt = state.optimizer
        if len(opt.param_groups) == 1 and len(opt.param_groups[0]["params"]) > 1:
            old = opt.param_groups[0]
            layer_decay = 1.0
            groups = []
            for depth, (name, p) in enumerate(state.policy.named_parameters()):
                groups.append({"params": [p], "lr": old["lr"] * layer_decay ** 0, "weight_decay": old["weight_decay"],
                               "initial_lr": old["initial_lr"], "name": name})
            new = torch.optim.AdamW(groups, lr=old["lr"], betas=old["betas"], eps=old["eps"],
                                    weight_decay=old["weight_decay"], foreach=False)
            for p, st in opt.state.items():
                new.state[p] = st
            epoch = int(state.scheduler.last_epoch)
            fn = state.scheduler.lr_lambdas[0]
            sched = torch.optim.lr_scheduler.LambdaLR(new, [fn] * len(groups))
            sched.last_epoch = epoch
            for g in new.param_groups:
                g["lr"] = old["lr"]
            sched._last_lr = [g["lr"] for g in new.param_groups]
            state.optimizer, state.scheduler = new, sched
        return super().train_step(state, batch, cfg)
