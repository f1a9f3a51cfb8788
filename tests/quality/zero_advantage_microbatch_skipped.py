"""Broken backend: a micro-batch whose advantages are all zero contributes no gradient.

A compute-saving shortcut ("no policy gradient there, skip its backward"). Its forward still runs,
so the logged loss and metrics are right, but the KL term of those rows, which NeMo-RL
accumulates like every other micro-batch's loss (semantics §4.6), never reaches the gradient.
Invisible at step 0, where the policy equals the reference and the KL gradient is zero.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.loss import LossOutput
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState
from tests.quality._patching import loss_replaced

EXPECTED_CHECK = "train.gradient"
SCENARIO = "kl-zero-advantage-steps"


def _skip_zero_advantage(original: Callable[..., LossOutput]) -> Callable[..., LossOutput]:
    def loss(cfg: Any, **kwargs: Any) -> LossOutput:
        out = original(cfg, **kwargs)
        if bool((kwargs["advantages"] * kwargs["token_mask"]).abs().sum() == 0):
            # the same value, but a graph that gives every parameter a zero gradient: backward "skipped"
            return LossOutput(loss=out.loss.detach() + 0.0 * kwargs["curr_logprobs"].sum(), metrics=out.metrics)
        return out

    return loss


class Backend(ReferenceBackend):
    """Leaves all-zero-advantage micro-batches out of the gradient."""

    name = "zero-advantage-microbatch-skipped"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        with loss_replaced(_skip_zero_advantage):
            return super().train_step(state, batch, cfg)
