"""Broken backend: ``loss_fn.force_on_policy_ratio`` sets the PPO ratio to the constant ``torch.ones_like(lp)``.

The value is right — the ratio is exactly 1, so ``probs_ratio`` and every logged ratio metric read 1 — but a constant
carries no gradient, so the policy-gradient term ``-A·r`` no longer depends on the weights: only the KL term (zero at
the first step, when the policy still equals the reference) trains. NeMo-RL writes it as ``r = exp(lp − sg(lp))``,
whose value is 1 and whose gradient is ∇lp (nemo-rl-semantics §4.3: "Force on-policy: r = exp(lp - sg(lp)), whose
value is 1"). The option is supported on the physical-trace path (`SUPPORTED_FIELDS`: loss_fn.force_on_policy_ratio).
"""

from __future__ import annotations

from unittest.mock import patch

from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.gradient"
SCENARIO = "force-on-policy-ratio"


class Backend(ReferenceBackend):
    name = "force-on-policy-ratio-without-gradient"

    def train_step(self, state, batch, cfg):
        if not cfg.loss_fn.force_on_policy_ratio:
            return super().train_step(state, batch, cfg)
        loss = T.clipped_pg_loss

        def constant_ratio_loss(cfg_, **kw):
            # r = 1 as a constant: the same as feeding the loss logprobs that carry no gradient into the ratio,
            # while the KL term still sees the live logprobs
            curr = kw["curr_logprobs"]
            out_pg = loss(cfg_.model_copy(update={"reference_policy_kl_penalty": 0.0}),
                          **{**kw, "curr_logprobs": curr.detach(), "reference_logprobs": None})
            out_kl = loss(cfg_, **kw)
            out_kl_pg_only = loss(cfg_.model_copy(update={"reference_policy_kl_penalty": 0.0}),
                                  **{**kw, "reference_logprobs": None})
            # total = PG term without gradient + KL term with gradient
            total = out_pg.loss + (out_kl.loss - out_kl_pg_only.loss)
            return type(out_kl)(loss=total, metrics=out_kl.metrics)

        with patch.object(T, "clipped_pg_loss", constant_ratio_loss):
            return super().train_step(state, batch, cfg)
