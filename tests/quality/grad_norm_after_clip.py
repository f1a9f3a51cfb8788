"""Broken backend (misreporting): ``grad_norm`` is the norm of the gradient *after* clipping (recomputed from the
clipped ``.grad``), so a step whose clip binds logs ``max_grad_norm`` instead of how large the gradient was.

NeMo-RL logs the total norm ``clip_grad_norm_`` returns, i.e. before clipping (README: "report ... `grad_norm`
(before clipping)"); the clipped value hides exactly the spikes the metric is there to show. Training is the
reference's.
"""

from __future__ import annotations

from compactsim.harness.core import metrics as M
from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._patching import with_metrics

EXPECTED_CHECK = "train.grad_norm"
SCENARIO = "layout-dp2-microbatch2-mask-sample"  # gradient norm ~1.6 > max_grad_norm 1: the clip binds


class Backend(ReferenceBackend):
    name = "grad-norm-after-clip"

    def train_step(self, state, batch, cfg):
        result = super().train_step(state, batch, cfg)
        bound = cfg.policy.max_grad_norm
        norm = result.metrics[M.GRAD_NORM]
        if bound is not None and norm > bound:
            norm = norm * bound / (norm + 1e-6)  # what clip_grad_norm_ leaves: ‖g‖·c/(‖g‖ + 1e-6)
        return with_metrics(result, {M.GRAD_NORM: norm})
