"""Broken backend: under dp_size > 1 only the actor term is scaled by dp_size before backward, not the KL term.

A trainer that adds the KL penalty after its `× dp_size` leaves the KL gradient divided by dp_size once the
all-reduce averages over ranks; NeMo-RL backprops the whole loss, actor + KL, times dp_size (§4.6).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.loss import LossConfig, LossOutput
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState
from tests.quality._patching import loss_replaced

EXPECTED_CHECK = "train.grad_norm"
SCENARIO = "kl-k1-unclamped-dp2-mask-sample"  # two ranks and a β 0.5 KL


class Backend(ReferenceBackend):
    """Returns actor + KL / dp_size as the loss, so the trainer's `× dp_size` reaches the actor term alone."""

    name = "kl-not-dp-scaled"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        dp = batch.dp_size

        def wrap(original: Callable[..., LossOutput]) -> Callable[..., LossOutput]:
            def loss(cfg_: LossConfig, **kw: Any) -> LossOutput:
                out = original(cfg_, **kw)
                if cfg_.reference_policy_kl_penalty == 0 or dp == 1:
                    return out
                actor = original(cfg_.model_copy(update={"reference_policy_kl_penalty": 0.0}),
                                 **{**kw, "reference_logprobs": None})
                kl = out.loss - actor.loss  # the KL term, carrying its gradient
                return LossOutput(loss=actor.loss + kl / dp, metrics=out.metrics)
            return loss

        with loss_replaced(wrap):
            return super().train_step(state, batch, cfg)
