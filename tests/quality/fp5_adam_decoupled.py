"""A CORRECT backend (false-positive hunt 5): `torch.optim.Adam(decoupled_weight_decay=True)` with betas from a YAML list.

torch's AdamW *is* Adam with `decoupled_weight_decay=True` (torch >= 2.6 builds AdamW that way); a trainer that takes
its optimizer class and kwargs from a config (NeMo-RL's `optimizer: {name: torch.optim.Adam, kwargs: {...}}`, with
`betas: [0.9, 0.999]` a YAML list) builds this one. State (moments, counters) is carried over; the warmup LambdaLR is
rebuilt over it at the current epoch with the rate that epoch has.
"""

from __future__ import annotations

import torch

from compactsim.harness.pipeline.backend import ReferenceBackend

SCENARIO = "warmup-weight-decay-no-clip"


class Backend(ReferenceBackend):
    name = "fp5-adam-decoupled"

    def train_step(self, state, batch, cfg):
        opt = state.optimizer
        if type(opt) is not torch.optim.Adam:
            old = opt.param_groups[0]
            kwargs = {"lr": old["initial_lr"], "betas": [0.9, 0.999], "eps": 1e-8,
                      "weight_decay": cfg.policy.weight_decay, "decoupled_weight_decay": True, "foreach": True}
            new = torch.optim.Adam(state.policy.parameters(), **kwargs)
            new.load_state_dict(opt.state_dict())  # moments, counters and the group's lr / initial_lr
            for g in new.param_groups:  # load_state_dict restored the old group's hyperparameters: the config's again
                g.update(betas=[0.9, 0.999], foreach=True, decoupled_weight_decay=True)
            fn = state.scheduler.lr_lambdas[0]
            epoch = int(state.scheduler.last_epoch)
            sched = torch.optim.lr_scheduler.LambdaLR(new, fn)
            sched.last_epoch = epoch
            for g in new.param_groups:
                g["lr"] = g["initial_lr"] * fn(epoch)
            sched._last_lr = [g["lr"] for g in new.param_groups]
            state.optimizer, state.scheduler = new, sched
        return super().train_step(state, batch, cfg)
