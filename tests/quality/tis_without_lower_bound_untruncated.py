"""Broken backend: `tis` with only an upper bound is not truncated at all.

nemo-rl-semantics §4.4: `tis` clamps w to [min or 0, ratio]; a truncated_importance_sampling_ratio_min of
None means a lower bound of 0, not "no truncation". This trainer only truncates when both bounds are set
(`if lo is not None and hi is not None`), so weights above the upper bound train untruncated and its
is_oob_ratio is never reported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from compactsim.harness.pipeline.loss import LossConfig, LossOutput
from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._patching import loss_replaced

EXPECTED_CHECK = "train.gradient"
SCENARIO = "loss-metrics-tis-upper-only"


class Backend(ReferenceBackend):
    name = "tis-without-lower-bound-untruncated"

    def train_step(self, state, batch, cfg):
        def wrap(original: Callable[..., LossOutput]) -> Callable[..., LossOutput]:
            def loss(cfg_: LossConfig, **kw: Any) -> LossOutput:
                if cfg_.truncated_importance_sampling_type == "tis" and cfg_.truncated_importance_sampling_ratio_min is None:
                    cfg_ = cfg_.model_copy(update={"truncated_importance_sampling_type": None,
                                                   "truncated_importance_sampling_ratio": None})
                return original(cfg_, **kw)
            return loss

        with loss_replaced(wrap):
            return super().train_step(state, batch, cfg)
