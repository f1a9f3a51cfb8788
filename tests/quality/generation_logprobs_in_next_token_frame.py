"""Broken backend: the behaviour (generation) logprobs are written in the *next-token* frame — sampled token t's
logprob at column t − 1, the position whose logits predicted it — while the token mask and the advantages stay in
NeMo-RL's own-position frame (column t holds token t's values, nemo-rl-semantics §4.2).

verl and OpenRLHF keep response-aligned logprobs in that frame, and a materializer ported from them writes
``logprobs[start - 1:end - 1]``. Every trained position then pairs a token with its successor's behaviour logprob
(and the last sampled token of each call with the unset 0), so the importance weights, ``token_mult_prob_error`` and
every mismatch metric are computed against the wrong numbers; the row's tokens, mask and advantages are right.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "row.logprobs"
SCENARIO = "no-compaction"


class Backend(ReferenceBackend):
    name = "generation-logprobs-in-next-token-frame"

    def materialize(self, plans, cfg):
        batch = super().materialize(plans, cfg)
        own = batch.row_generation_logprobs  # (R, S), own-position
        shifted = torch.zeros_like(own)
        for r, spans in enumerate(batch.row_mask_spans):
            for start, end in spans:
                shifted[r, start - 1:end - 1] = own[r, start:end]
        return replace(batch, row_generation_logprobs=shifted)
