"""Broken backend: decoupled weight decay applied by hand (``p *= 1 − lr·λ`` before an AdamW step run with
``weight_decay=0``, as a trainer that keeps decay out of a fused optimizer does) with the *configured* learning rate
``policy.learning_rate`` instead of the rate the scheduler set for this step.

AdamW's decay is ``p ← p − lr_t·λ·p`` with the same scheduled ``lr_t`` as the update (the README: "AdamW with
decoupled weight decay"; `correct_manual_decoupled_decay` does it by hand with the group's own rate and passes). During
an LR warmup the base rate is larger than ``lr_t``, so every weight decays too much; after the warmup the two agree.
"""

from __future__ import annotations

import torch

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._patching import step_with_group_changes

EXPECTED_CHECK = "train.update"
SCENARIO = "warmup-weight-decay-no-clip"


class Backend(ReferenceBackend):
    name = "manual-decay-with-base-lr"

    def train_step(self, state, batch, cfg):
        base_lr = cfg.policy.learning_rate

        def decay_by_hand(group):
            lam = group["weight_decay"]
            if lam:
                with torch.no_grad():
                    for p in group["params"]:
                        p.mul_(1.0 - base_lr * lam)
            return {"weight_decay": 0.0}

        with step_with_group_changes(state.optimizer, decay_by_hand):
            return super().train_step(state, batch, cfg)
