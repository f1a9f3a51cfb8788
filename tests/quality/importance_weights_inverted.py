"""Broken backend: the importance weight is ``exp(gen − prev)`` — the behaviour policy over the trainer's —
instead of NeMo-RL's ``w = exp(prev − gen)`` (nemo-rl-semantics §4.4: π_trainer / π_behaviour per token).

The log-ratio written the other way round, as ``torch.exp(old_logprobs - logprobs)`` reads once the names have
shifted (vLLM's logprobs are the "old" ones in one codebase, the trainer's in another). Tokens the trainer now
finds likelier than the sampler did are weighted down instead of up. With both sides equal the weight is 1 either
way, so a policy-mode run, where trainer and sampler share the weights, never shows it; the logged
``sampling_importance_ratio`` and every mismatch metric stay right, since only the weight the loss uses is
inverted.
"""

from __future__ import annotations

from typing import Any

from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.loss import LossOutput
from tests.quality._patching import loss_replaced

EXPECTED_CHECK = "train.gradient"
SCENARIO = "importance-sampling-correction"


def _inverted(original):
    def loss(cfg: Any, **kw: Any) -> LossOutput:
        right = original(cfg, **kw)  # the metrics, computed as NeMo-RL computes them
        if not cfg.use_importance_sampling_correction:
            return right
        prev, gen = kw["prev_logprobs"], kw["generation_logprobs"]
        # exp(prev − gen') with gen' = 2·prev − gen is exp(gen − prev): the same loss code, the ratio inverted
        wrong = original(cfg, **{**kw, "generation_logprobs": 2 * prev - gen})
        metrics = {**right.metrics, "loss": wrong.metrics["loss"], "actor_loss": wrong.metrics["actor_loss"]}
        return LossOutput(loss=wrong.loss, metrics=metrics)

    return loss


class Backend(ReferenceBackend):
    name = "importance-weights-inverted"

    def train_step(self, state, batch, cfg):
        with loss_replaced(_inverted):
            return super().train_step(state, batch, cfg)
