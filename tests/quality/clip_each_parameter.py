"""Broken backend: ``policy.max_grad_norm`` clips every parameter tensor to that norm on its own
(``for p in params: clip_grad_norm_([p], max_norm)``) instead of the whole model's gradient at once.

NeMo-RL (and torch's ``clip_grad_norm_(model.parameters(), max_norm)``) scales all gradients by one factor
``min(1, c/(‖g‖+1e-6))`` from the total norm (README "What the audit compares"; the oracle's clipping). Per tensor,
a model whose total norm is above the bound but whose tensors are each below it is not clipped at all, and the
gradient's direction changes wherever some tensors are clipped and others not. The reported ``grad_norm`` is still
the total norm before clipping.
"""

from __future__ import annotations

from unittest.mock import patch

import torch

from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.gradient"
SCENARIO = "layout-dp2-microbatch2-mask-sample"  # total gradient norm ~1.7 > max_grad_norm 1: the clip binds


class Backend(ReferenceBackend):
    name = "clip-each-parameter"

    def train_step(self, state, batch, cfg):
        original = T._clip_grad_norm

        def per_tensor(params, max_norm):
            total = original(params, None)  # the norm before clipping, nothing scaled
            if max_norm is not None:
                for p in params:
                    if p.grad is not None:
                        torch.nn.utils.clip_grad_norm_([p], max_norm, foreach=False)
            return total

        with patch.object(T, "_clip_grad_norm", per_tensor):
            return super().train_step(state, batch, cfg)
