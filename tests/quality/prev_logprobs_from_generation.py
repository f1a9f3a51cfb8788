"""Broken backend: the PPO ratio's "old" logprobs are the generation server's (``prev := gen``) instead of the trainer's
own logprobs under the weights before the step.

verl's "use the rollout log-probs as old_log_prob" shortcut saves the trainer's extra forward pass. NeMo-RL recomputes
``prev_logprobs`` with the training weights (nemo-rl-semantics §4.3-4.4), so the ratio is 1 at every trained token and
any sampler/trainer mismatch is corrected by the importance weight ``exp(prev − gen)``. With ``prev = gen`` the ratio
``exp(lp − gen)`` carries the whole mismatch into the clipped surrogate, where the clip zeroes the gradient of every
token whose ratio left [1 − ε, 1 + ε] in its advantage's direction, and every mismatch metric reads perfect
(``token_mult_prob_error`` exactly 1, ``gen_kl_error`` 0) because it compares gen with itself. Where sampler and trainer
agree exactly nothing changes.
"""

from __future__ import annotations

from typing import Any

from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.loss import LossOutput
from tests.quality._patching import loss_replaced

EXPECTED_CHECK = "train.gradient"
SCENARIO = "no-compaction"


def _generation_as_prev(original):
    def loss(cfg: Any, **kw: Any) -> LossOutput:
        return original(cfg, **{**kw, "prev_logprobs": kw["generation_logprobs"]})

    return loss


class Backend(ReferenceBackend):
    name = "prev-logprobs-from-generation"

    def train_step(self, state, batch, cfg):
        with loss_replaced(_generation_as_prev):
            return super().train_step(state, batch, cfg)
