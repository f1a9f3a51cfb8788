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
from tests.quality import correct_megatron_no_decay_group as megatron

EXPECTED_CHECK = "train.gradient"
SCENARIO = "weight-decay-clip-binds"

_clip_grad_norm = trainer_module._clip_grad_norm


class Backend(megatron.Backend):
    name = "clip-per-param-group"

    def train_step(self, state, batch, cfg):
        def per_group_clip(params, max_norm):
            total = _clip_grad_norm(params, None)  # the whole model's norm, reported
            if max_norm is not None:
                for group in state.optimizer.param_groups:  # BUG: each group scaled by its own norm
                    torch.nn.utils.clip_grad_norm_([p for p in group["params"] if p.grad is not None], max_norm,
                                                   foreach=False)
            return total

        with patch.object(trainer_module, "_clip_grad_norm", per_group_clip):
            if cfg.policy.weight_decay > 0:  # Megatron's decay / no-decay groups, built at the first step
                return super().train_step(state, batch, cfg)
            return ReferenceBackend.train_step(self, state, batch, cfg)
