"""Broken backend: a step whose batch trains no token (every rollout flagged ``mask_sample``) skips the backward
pass altogether — "nothing to learn" — and then still calls ``optimizer.step()`` and ``scheduler.step()`` so the
step counts stay right. With every ``.grad`` left None, AdamW skips every parameter: no weight decay, no momentum
carried forward, no per-parameter step. NeMo-RL's workers run the forward and backward of every micro-batch
whatever its valid count (a micro-batch of masked rows contributes a zero loss, nemo-rl-semantics §4.6, §3.6), so
each parameter the rows reach is handed a zero gradient and AdamW still decays it and advances its counter.
"""

from __future__ import annotations

from unittest.mock import patch

from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "counts.optimizer"
SCENARIO = "loss-metrics-all-rows-masked"


class Backend(ReferenceBackend):
    name = "skip-backward-without-trained-tokens"

    def train_step(self, state, batch, cfg):
        n = T.valid_counts(batch.row_token_mask, batch.row_sample_mask)
        if n.tokens > 0:
            return super().train_step(state, batch, cfg)
        clip = T._clip_grad_norm

        def skipped(params, max_norm):
            for p in params:  # as if backward never ran: AdamW skips a parameter whose .grad is None
                p.grad = None
            return 0.0

        with patch.object(T, "_clip_grad_norm", skipped):
            return super().train_step(state, batch, cfg)
