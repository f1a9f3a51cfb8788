"""Broken backend (misreporting): ``token_mult_prob_error`` is logged as the mean over micro-batches of each
micro-batch's own token mean (``np.mean`` of per-micro-batch ``masked_mean``s, each over its local tokens), the way a
loss that normalises its metrics locally and a driver that averages the list combine.

NeMo-RL divides each micro-batch's sum by the *global* valid-token count, so the driver's sum over micro-batches is
the mean over every trained token of the step (nemo-rl-semantics §4.6: "Summed over microbatches, this is the global
mean of exp(|Δ logprob|) on trained tokens"). The two agree only when every micro-batch holds as many trained tokens
as every other, or when the error is the same everywhere (policy-mode generation, where it is 1 on every token).
"""

from __future__ import annotations

from unittest.mock import patch

from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._patching import local_counts, with_metrics

EXPECTED_CHECK = "train.metric"
SCENARIO = "importance-sampling-correction"
EXPECTED_KEY = "token_mult_prob_error"


class Backend(ReferenceBackend):
    name = "token-mult-prob-error-microbatch-mean"

    def train_step(self, state, batch, cfg):
        loss = T.clipped_pg_loss
        local_means: list[float] = []

        def recording(cfg_, **kw):
            out = loss(cfg_, **kw)
            tokens, _ = local_counts(kw)
            if tokens > 0:  # the global-normalised share, rescaled to this micro-batch's own mean
                local_means.append(out.metrics[EXPECTED_KEY] * (float(kw["global_valid_tokens"]) + 1e-8) / (tokens + 1e-8))
            return out

        with patch.object(T, "clipped_pg_loss", recording):
            result = super().train_step(state, batch, cfg)
        if not local_means:
            return result
        return with_metrics(result, {EXPECTED_KEY: sum(local_means) / len(local_means)})
