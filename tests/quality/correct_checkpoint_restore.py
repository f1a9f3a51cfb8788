"""A CORRECT backend: before every step the trainer restores policy, optimizer and scheduler from a checkpoint
of themselves (new module, new parameter objects, new AdamW and LambdaLR loading the old state_dicts).

What a trainer that saves and reloads between steps (preemption-safe loops, CPU offload) does: the weights,
moments, step counters and schedule are bit-identical, only the Python objects are new. It must pass.
"""

from __future__ import annotations

import torch

from compactsim.harness.core.policy import TinyPolicy
from compactsim.harness.pipeline.backend import ReferenceBackend

SCENARIO = "kl-k2-strong"


class Backend(ReferenceBackend):
    name = "correct-checkpoint-restore"

    def train_step(self, state, batch, cfg):
        policy = TinyPolicy.load_bytes(state.policy.to_bytes(), dtype=state.dtype, device=state.device).train()
        old_opt, old_sched = state.optimizer, state.scheduler
        group = old_opt.param_groups[0]
        opt = torch.optim.AdamW(policy.parameters(), lr=group["lr"], betas=group["betas"], eps=group["eps"],
                                weight_decay=group["weight_decay"], foreach=False)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, old_sched.lr_lambdas[0])
        opt.load_state_dict(old_opt.state_dict())  # state maps to the new parameters by position
        sched.load_state_dict(old_sched.state_dict())
        state.policy, state.optimizer, state.scheduler = policy, opt, sched
        return super().train_step(state, batch, cfg)
