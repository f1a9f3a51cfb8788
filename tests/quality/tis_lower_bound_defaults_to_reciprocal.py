"""Broken backend: `tis` with no lower bound truncates weights below 1/upper, verl's default, instead of at 0.

verl's rollout correction documents `rollout_is_threshold_lower: null  # defaults to 1/upper`; a trainer that
ports that default under NeMo-RL's config clamps w to [1/ratio, ratio] when
`truncated_importance_sampling_ratio_min` is None. NeMo-RL's `tis` clamps to [min or 0, ratio]
(nemo-rl-semantics §4.4), so a token whose behaviour policy put much more mass on it than the trainer does
(w < 1/ratio) must keep its small weight.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.loss import LossConfig, LossOutput
from tests.quality._patching import loss_replaced

EXPECTED_CHECK = "train.gradient"
SCENARIO = "tis-upper-only-weights-below-reciprocal"


class Backend(ReferenceBackend):
    name = "tis-lower-bound-defaults-to-reciprocal"

    def train_step(self, state, batch, cfg):
        def wrap(original: Callable[..., LossOutput]) -> Callable[..., LossOutput]:
            def loss(cfg_: LossConfig, **kw: Any) -> LossOutput:
                hi = cfg_.truncated_importance_sampling_ratio
                if (cfg_.truncated_importance_sampling_type == "tis" and cfg_.truncated_importance_sampling_ratio_min is None
                        and hi is not None and hi > 1):  # verl's default lower bound, 1/upper (an upper below 1 has none)
                    cfg_ = cfg_.model_copy(update={"truncated_importance_sampling_ratio_min": 1.0 / hi})
                return original(cfg_, **kw)
            return loss

        with loss_replaced(wrap):
            return super().train_step(state, batch, cfg)
