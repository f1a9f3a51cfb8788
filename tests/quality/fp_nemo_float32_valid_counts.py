"""A CORRECT backend: the loss normaliser `N + 1e-8` held in float32, as NeMo-RL's counts are (false-positive hunt 4).

NeMo-RL's `global_valid_toks` is a sum of float32 masks, so `global_valid_toks + 1e-8` is a float32 tensor in which
the 1e-8 is lost for every N ≥ 1 (float32 keeps about 7 digits): its token means are Σ v·m / N, a relative 1e-8/N
above the semantics' Σ v·m / (N + 1e-8). At N = 0 the 1e-8 survives and a step without trained tokens still has
loss 0. The audit allows that relative 1e-8/N on the loss, its metrics and the gradient
(`Tolerances.for_normaliser`); before it did, a step training 4 tokens (2.5e-9 off) was a `train.loss` finding.
"""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._patching import loss_replaced, loss_variant

SCENARIO = "explicit-logprobs"

#: NeMo's normaliser: the count and its epsilon added in float32, then used in the loss's dtype
FLOAT32_NORMALISER = loss_variant((
    "return (values * mask).sum() / (n_tokens + NORMALIZER_EPS)",
    "return (values * mask).sum() / (n_tokens.to(torch.float32) + NORMALIZER_EPS).to(n_tokens.dtype)",
))


class Backend(ReferenceBackend):
    name = "fp-nemo-float32-valid-counts"

    def train_step(self, state, batch, cfg):
        with loss_replaced(lambda _original: FLOAT32_NORMALISER):
            return super().train_step(state, batch, cfg)

