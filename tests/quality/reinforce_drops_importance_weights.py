"""Broken backend: under ``loss_fn.disable_ppo_ratio`` (REINFORCE, ``ℓ = −A·lp``) the trainer leaves the importance
weights out of the loss even with ``use_importance_sampling_correction`` on — "no ratio, no off-policy correction" —
while it still logs ``sampling_importance_ratio``.

NeMo-RL applies ``w = exp(prev − gen)`` to the per-token loss whatever the ratio (nemo-rl-semantics §4.3-4.4: the
per-token loss is ``max(−A·r, −A·r̂)`` with ``r = r̂ = lp`` under disable_ppo_ratio, and "the weights used are w
when use_importance_sampling_correction, else ones"): the correction is for the behaviour policy's logprobs, which
REINFORCE's gradient ``−A·∇lp`` assumes are the trainer's.
"""

from __future__ import annotations

from unittest.mock import patch

from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.gradient"
SCENARIO = "disable-ppo-ratio-importance-sampling"


class Backend(ReferenceBackend):
    name = "reinforce-drops-importance-weights"

    def train_step(self, state, batch, cfg):
        lf = cfg.loss_fn
        if not (lf.disable_ppo_ratio and lf.use_importance_sampling_correction):
            return super().train_step(state, batch, cfg)
        loss = T.clipped_pg_loss

        def unweighted(cfg_, **kw):
            logged = loss(cfg_, **kw)
            trained = loss(cfg_.model_copy(update={"use_importance_sampling_correction": False,
                                                    "truncated_importance_sampling_type": None}), **kw)
            return type(logged)(loss=trained.loss, metrics=logged.metrics)

        with patch.object(T, "clipped_pg_loss", unweighted):
            return super().train_step(state, batch, cfg)
