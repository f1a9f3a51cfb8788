"""Broken backend: Megatron-core's decay / no-decay param groups (biases and 1-D parameters at λ = 0, accepted by
the audit as `correct_megatron_no_decay_group`), but the warmup writes the scheduled rate into
``optimizer.param_groups[0]["lr"]`` only — code written when the optimizer had a single group.

The no-decay group (every bias and LayerNorm/1-D weight) keeps its initial rate, the full peak learning rate,
through the whole warmup. Outside warmup the two groups agree. NeMo-RL's schedulers set every param group's rate
(torch's LRScheduler iterates `optimizer.param_groups`; Megatron's `OptimizerParamScheduler.step` loops over all
groups), so every parameter warms up together (README: "a linear warmup that advances once per logical batch").
"""

from __future__ import annotations

import torch

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality.correct_megatron_no_decay_group import megatron_groups

EXPECTED_CHECK = "train.update"
SCENARIO = "warmup-weight-decay-no-clip"


class _FirstGroupOnly(torch.optim.lr_scheduler.LambdaLR):
    def get_lr(self):
        lrs = super().get_lr()
        return [lrs[0]] + [g["initial_lr"] for g in self.optimizer.param_groups[1:]]


class Backend(ReferenceBackend):
    name = "warmup-sets-only-first-param-group"

    def train_step(self, state, batch, cfg):
        old = state.optimizer
        if len(old.param_groups) == 1 and not old.state:
            group = old.param_groups[0]
            opt = torch.optim.AdamW(megatron_groups(state.policy, group["weight_decay"]), lr=group["initial_lr"],
                                    betas=group["betas"], eps=group["eps"], foreach=False)
            state.optimizer = opt
            state.scheduler = _FirstGroupOnly(opt, state.scheduler.lr_lambdas[0])
        return super().train_step(state, batch, cfg)
