"""Broken backend: under ``loss_fn.force_on_policy_ratio`` the trainer leaves the importance weights out of the loss
(``w = 1``) even with ``use_importance_sampling_correction`` on — "the ratio is forced on-policy, so there is nothing to
correct" — while it still logs ``sampling_importance_ratio`` from ``exp(prev − gen)``.

NeMo-RL sets ``prev := sg(curr)`` under force_on_policy_ratio (nemo-rl-semantics §4.3, loss_functions.py:401-402) and
then applies the token-level weight ``w = exp(prev − gen)`` whenever ``use_importance_sampling_correction`` is set
(§4.4: "The weights used are w when use_importance_sampling_correction, else ones"): forcing the PPO ratio to 1 says
nothing about the behaviour policy, whose logprobs (vLLM's kernels, a stale version) still differ from the trainer's.
"""

from __future__ import annotations

from unittest.mock import patch

from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.gradient"
SCENARIO = "force-on-policy-ratio-importance-sampling"


class Backend(ReferenceBackend):
    name = "force-on-policy-drops-importance-weights"

    def train_step(self, state, batch, cfg):
        lf = cfg.loss_fn
        if not (lf.force_on_policy_ratio and lf.use_importance_sampling_correction):
            return super().train_step(state, batch, cfg)
        loss = T.clipped_pg_loss

        def unweighted(cfg_, **kw):
            logged = loss(cfg_, **kw)  # the metrics, importance ratio included, are what the trainer logs
            trained = loss(cfg_.model_copy(update={"use_importance_sampling_correction": False,
                                                    "truncated_importance_sampling_type": None}), **kw)
            return type(logged)(loss=trained.loss, metrics=logged.metrics)

        with patch.object(T, "clipped_pg_loss", unweighted):
            return super().train_step(state, batch, cfg)
