"""Broken backend: ``loss_fn.kl_output_clamp_value`` is applied to the k1 estimator only — "k2 = x²/2 and
k3 = eˣ − 1 − x are non-negative and small near the reference; only k1 = −x can swing" — so a k2 or k3 penalty
trains its raw per-token value however far the policy has moved.

NeMo-RL clamps the weighted per-token KL to ``±kl_output_clamp_value`` whatever the estimator (nemo-rl-semantics
§4.5: "The weight is detached where the input clamp bites, multiplied in, and the product is clamped to
±kl_output_clamp_value"): where it binds, the token's KL is the constant bound and trains nothing.
kl-k1-clamped shows the clamp for k1 only.
"""

from __future__ import annotations

from unittest.mock import patch

from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.gradient"
SCENARIO = "kl-k3-output-clamp-binds"


class Backend(ReferenceBackend):
    name = "kl-output-clamp-only-k1"

    def train_step(self, state, batch, cfg):
        if cfg.loss_fn.reference_policy_kl_type == "k1":
            return super().train_step(state, batch, cfg)
        loss = T.clipped_pg_loss

        def unclamped(cfg_, **kw):
            return loss(cfg_.model_copy(update={"kl_output_clamp_value": None}), **kw)

        with patch.object(T, "clipped_pg_loss", unclamped):
            return super().train_step(state, batch, cfg)
