"""A CORRECT backend: the optimizer and scheduler are rebuilt from their state_dicts before every step.

What a trainer that checkpoints and resumes (or offloads its optimizer between steps) does: a new
AdamW over the same parameters loads the old one's state, a new LambdaLR the old scheduler's, and
`state` holds the new objects. The update is the same; the audit must pass it.
"""

from __future__ import annotations

import torch

from compactsim.harness.pipeline.backend import ReferenceBackend

SCENARIO = "warmup-weight-decay-no-clip"


class Backend(ReferenceBackend):
    name = "correct-state-dict-roundtrip"

    def train_step(self, state, batch, cfg):
        old_opt, old_sched = state.optimizer, state.scheduler
        group = old_opt.param_groups[0]
        opt = torch.optim.AdamW(state.policy.parameters(), lr=group["lr"], betas=group["betas"], eps=group["eps"],
                                weight_decay=group["weight_decay"], foreach=False)
        # build both, then load both: the scheduler's constructor steps once (setting lr to its step-0 rate),
        # and the optimizer's state_dict puts the current rate back
        sched = torch.optim.lr_scheduler.LambdaLR(opt, old_sched.lr_lambdas[0])
        opt.load_state_dict(old_opt.state_dict())
        sched.load_state_dict(old_sched.state_dict())
        state.optimizer, state.scheduler = opt, sched
        return super().train_step(state, batch, cfg)
