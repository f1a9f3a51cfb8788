"""Broken backend: the loss is divided by the global token count N itself, not NeMo's N + 1e-8.

`masked_mean(..., global_normalization_factor=N) = Σ v·m / (N + 1e-8)` (nemo-rl-semantics §4.6): the
epsilon is what keeps a step without a single trained token (every rollout `mask_sample`'d, or every
sample filtered as overlong) at loss 0. Dividing by N alone differs by 1e-8/N relative on any step that trains
tokens (what NeMo-RL's float32 counts do too, and the audit allows: `fp_nemo_float32_valid_counts`), and turns a step that trains none into 0/0: a NaN loss whose NaN
gradient then poisons every weight.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from compactsim.harness.pipeline.loss import LossConfig, LossOutput
from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._patching import loss_replaced

EXPECTED_CHECK = "train.loss"
SCENARIO = "loss-metrics-all-rows-masked"


class Backend(ReferenceBackend):
    name = "normaliser-without-epsilon"

    def train_step(self, state, batch, cfg):
        def wrap(original: Callable[..., LossOutput]) -> Callable[..., LossOutput]:
            def loss(cfg_: LossConfig, **kw: Any) -> LossOutput:
                out = original(cfg_, **kw)
                n = float(kw["global_valid_tokens"])
                factor = (n + 1e-8) / n if n > 0 else math.nan  # Σ/(N+eps) · (N+eps)/N = Σ/N
                metrics = dict(out.metrics)
                for key in ("loss", "actor_loss", "kl_penalty"):
                    if key in metrics:
                        metrics[key] = metrics[key] * factor
                return LossOutput(loss=out.loss * factor, metrics=metrics)
            return loss

        with loss_replaced(wrap):
            return super().train_step(state, batch, cfg)
