"""Broken backend: under dp > 1 each rank clips its own gradient to max_grad_norm before the all-reduce.

torch's clip_grad_norm_ on a sharded (FSDP/DTensor) model computes the global norm across ranks (NeMo-RL's
workers clip after the reduction, §4.6/oracle.optimizer); clipping each rank's local gradient by its local
norm scales the ranks differently and reports a local norm.
"""

from __future__ import annotations

from unittest.mock import patch

import torch

from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.gradient"
SCENARIO = "layout-dp2-microbatch2-mask-sample"  # two ranks; the all-reduced norm ~1.6 > max_grad_norm 1


class Backend(ReferenceBackend):
    name = "clip-per-rank-before-allreduce"

    def train_step(self, state, batch, cfg):
        take, clip = T._take_grads, T._clip_grad_norm
        norms: list[float] = []
        max_norm = cfg.policy.max_grad_norm

        def take_clipped(params):
            if max_norm is not None and batch.dp_size > 1:
                norms.append(float(torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=False)))
            return take(params)

        def clip_reported(params, max_norm_):
            total = clip(params, None if batch.dp_size > 1 else max_norm_)
            return max(norms) if norms else total

        with patch.object(T, "_take_grads", take_clipped), patch.object(T, "_clip_grad_norm", clip_reported):
            return super().train_step(state, batch, cfg)
