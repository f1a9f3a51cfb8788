"""Broken backend: a hand-written gradient clip multiplies every gradient by ``max_grad_norm / (‖g‖ + 1e-6)``
without capping the coefficient at 1, so a gradient *below* the bound is scaled up to it.

torch's ``clip_grad_norm_`` (and Megatron's ``clip_grad_by_total_norm_fp32``) scale only when the coefficient is
below 1 (``clamp(max=1.0)``, nemo-rl-semantics: clipping by ``min(1, c/(‖g‖ + 1e-6))``). Without the cap every
step applies a gradient of norm exactly ``max_grad_norm``: the same direction, the wrong size. Adam divides most of
a gradient's scale out of its update, the reported pre-clip norm is right, and a step whose gradient is above the
bound is clipped correctly, so only a step below it shows — in the gradient read back from AdamW's first moment.
"""

from __future__ import annotations

from unittest.mock import patch

import torch

from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.gradient"
SCENARIO = "no-compaction"


def _uncapped_clip(params, max_norm):
    grads = [p.grad for p in params if p.grad is not None]
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.to(torch.float64)) for g in grads]))
    if max_norm is not None:
        coef = max_norm / (float(norm) + 1e-6)  # no min(1, ...)
        for g in grads:
            g.mul_(coef)
    return float(norm)


class Backend(ReferenceBackend):
    name = "clip-coefficient-not-capped-at-one"

    def train_step(self, state, batch, cfg):
        with patch.object(T, "_clip_grad_norm", _uncapped_clip):
            return super().train_step(state, batch, cfg)
