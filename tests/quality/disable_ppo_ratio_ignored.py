"""Broken backend: `loss_fn.disable_ppo_ratio` (REINFORCE, r = r̂ = lp) is ignored; the PPO ratio is used.

nemo-rl-semantics §4.3: with disable_ppo_ratio the per-token loss is -A·lp. With the ratio 1 at every
trained token the gradient is the same (∇ exp(lp - sg(lp)) = ∇lp at lp = prev), so the optimizer moves
alike; the loss the trainer logs (-A instead of -A·lp) and its probs_ratio metrics (1 instead of lp) are
wrong, and any run that compares losses across the switch is misled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from compactsim.harness.pipeline.loss import LossConfig, LossOutput
from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._patching import loss_replaced

EXPECTED_CHECK = "train.loss"
SCENARIO = "loss-metrics-disable-ppo-ratio"


class Backend(ReferenceBackend):
    name = "disable-ppo-ratio-ignored"

    def train_step(self, state, batch, cfg):
        def wrap(original: Callable[..., LossOutput]) -> Callable[..., LossOutput]:
            def loss(cfg_: LossConfig, **kw: Any) -> LossOutput:
                return original(cfg_.model_copy(update={"disable_ppo_ratio": False}), **kw)
            return loss

        with loss_replaced(wrap):
            return super().train_step(state, batch, cfg)
