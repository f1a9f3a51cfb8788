"""Broken backend: rows whose advantage is 0 are left out of the global token count N.

A trainer that drops zero-advantage rollouts "since they carry no policy gradient" from the normaliser
(but still trains them, so the KL term stays) divides by too few tokens: NeMo-RL's N is
Σ token_mask[:, 1:]·sample_mask over the whole global batch (nemo-rl-semantics §4.6), advantages aside.

The gradient comes out N/N' times too large. Where clipping binds, as in this scenario, clipping scales it back
to the same norm, so the applied gradient is right but for the clip's 1e-6 epsilon (~2e-7 relative, within what a
float32 clip norm moves): the reported gradient norm and the token counts are what show it.
"""

from __future__ import annotations

from unittest.mock import patch

from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.grad_norm"
SCENARIO = "kl-zero-advantage-steps"


class Backend(ReferenceBackend):
    name = "zero-advantage-rows-left-out-of-normaliser"

    def train_step(self, state, batch, cfg):
        counts = T.valid_counts

        def valid(token_mask, sample_mask):
            if token_mask is batch.row_token_mask:
                nonzero = (batch.row_advantages != 0).any(dim=1).to(sample_mask.dtype)
                n = counts(token_mask, sample_mask * nonzero)
                return type(n)(tokens=max(n.tokens, 1.0), seqs=n.seqs)
            return counts(token_mask, sample_mask)

        with patch.object(T, "valid_counts", valid):
            return super().train_step(state, batch, cfg)
