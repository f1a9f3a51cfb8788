"""Broken backend: the token-level importance weight multiplies the whole per-token loss, KL penalty included
(``loss = mean(w · (ℓ_pg + β·kl))``), as a trainer that applies its rollout correction once, to the final
per-token loss, does.

NeMo-RL weights only the actor term by w; the KL term carries its own weight, the score-function weight
``exp(lp − sg(lp))`` (value 1), "never the actor's importance weight w" (nemo-rl-semantics §4.4-4.5; README "What
the audit compares"). The two agree when w = 1 (on-policy generation) or the KL term is 0 (the first step, when
the policy still equals the reference).
"""

from __future__ import annotations

from unittest.mock import patch

import torch

from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.gradient"
SCENARIO = "importance-sampling-icepop"


class Backend(ReferenceBackend):
    name = "importance-weights-on-kl-term"

    def train_step(self, state, batch, cfg):
        loss = T.clipped_pg_loss

        def loss_fn(cfg_, **kw):
            out = loss(cfg_, **kw)
            if not cfg_.use_importance_sampling_correction or cfg_.reference_policy_kl_penalty == 0:
                return out
            no_kl = loss(cfg_.model_copy(update={"reference_policy_kl_penalty": 0.0}), **{**kw, "reference_logprobs": None})
            kl_total = out.loss - no_kl.loss  # Σ β·kl·m / N with the KL's own weight
            # the same KL term with each token also weighted by its (truncated) importance weight
            curr = kw["curr_logprobs"]
            S = kw["token_mask"].shape[1]
            c = curr[:, 1:] if curr.shape[1] == S else curr
            tm = kw["token_mask"][:, 1:].to(c.dtype) * kw["sample_mask"].to(c.dtype)[:, None]
            prev = kw["prev_logprobs"][:, 1:].to(c.dtype)
            gen = kw["generation_logprobs"][:, 1:].to(c.dtype)
            ref = kw["reference_logprobs"][:, 1:].to(c.dtype)
            w = torch.nan_to_num(torch.exp(prev - gen), nan=0.0, posinf=0.0, neginf=0.0)
            hi, lo = cfg_.truncated_importance_sampling_ratio, cfg_.truncated_importance_sampling_ratio_min
            if cfg_.truncated_importance_sampling_type == "tis":
                w = w.clamp(0.0 if lo is None else lo, hi)
            elif cfg_.truncated_importance_sampling_type == "icepop":
                w = torch.where((w >= lo) & (w <= hi), w, torch.zeros_like(w))
            from compactsim.harness.pipeline.loss import _kl_estimate
            keep = tm != 0
            zero = torch.zeros((), dtype=c.dtype)
            c0 = torch.where(keep, c, zero)
            kl_tok = _kl_estimate(c0, torch.where(keep, ref, zero), cfg_.reference_policy_kl_type,
                                  input_clamp=cfg_.kl_input_clamp_value, output_clamp=cfg_.kl_output_clamp_value,
                                  weight=torch.exp(c0 - c0.detach()))
            n = float(kw["global_valid_tokens"]) + 1e-8
            kl_weighted = (w.detach() * cfg_.reference_policy_kl_penalty * kl_tok * tm).sum() / n
            return type(out)(loss=no_kl.loss + kl_weighted, metrics=out.metrics)

        with patch.object(T, "clipped_pg_loss", loss_fn):
            return super().train_step(state, batch, cfg)
