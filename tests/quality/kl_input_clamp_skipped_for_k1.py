"""Broken backend: ``loss_fn.kl_input_clamp_value`` is applied only to the k2 and k3 estimators — "k1 = −x is linear,
it cannot overflow" — so under k1 the raw ``ref − lp`` is used, and its score-function weight is never detached.

NeMo-RL clamps ``x = clamp(ref − lp, ±kl_input_clamp_value)`` before any estimator and detaches the KL weight where
the clamp bites (nemo-rl-semantics §4.5: "Let x = clamp(ref - lp_u, ±kl_input_clamp_value) ... k3, k1, k2";
utils.py:75-80), so on those tokens k1's value is ∓clamp and its gradient zero. The k2 analogue (a clamp in the k3
branch alone) is what kl-k2-input-clamp-binds shows.
"""

from __future__ import annotations

from unittest.mock import patch

from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.gradient"
SCENARIO = "kl-k1-input-clamp-binds"


class Backend(ReferenceBackend):
    name = "kl-input-clamp-skipped-for-k1"

    def train_step(self, state, batch, cfg):
        if cfg.loss_fn.reference_policy_kl_type != "k1":
            return super().train_step(state, batch, cfg)
        loss = T.clipped_pg_loss

        def unclamped(cfg_, **kw):
            return loss(cfg_.model_copy(update={"kl_input_clamp_value": None}), **kw)

        with patch.object(T, "clipped_pg_loss", unclamped):
            return super().train_step(state, batch, cfg)
