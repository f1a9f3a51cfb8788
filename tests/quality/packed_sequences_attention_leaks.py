"""Broken backend: sequence packing without per-row attention isolation — each micro-batch's rows are concatenated into
one sequence (position ids restarting in every row, as they should) but attention is plain causal over the whole pack.

The isolation is what ``cu_seqlens`` gives flash-attn's varlen kernel (and a block-diagonal mask gives SDPA); a packed
batch sent down a path that only sets ``is_causal=True`` lets every token attend to the rows packed before it. The first
row of each pack is computed exactly, so a run of one-row micro-batches (most of the catalogue) never shows it; with
several rows per micro-batch, every later row's logprobs, and the gradient, depend on its neighbours. Everything else is
`fp_packed_sequences`, the correct packing backend.
"""

from __future__ import annotations

from unittest.mock import patch

import torch

from tests.quality import fp_packed_sequences as packed

EXPECTED_CHECK = "train.gradient"
SCENARIO = "compaction-from-step-1"  # train_micro_batch_size 2: two rows per pack at every step

_BLOCK = packed._block_forward


def _causal_only(block, h, allowed, replay):
    t = h.shape[1]
    causal = torch.ones(t, t, dtype=torch.bool, device=h.device).tril()  # no row boundary
    return _BLOCK(block, h, causal, replay)


class Backend(packed.Backend):
    name = "packed-sequences-attention-leaks"

    def train_step(self, state, batch, cfg):
        with patch.object(packed, "_block_forward", _causal_only):
            return super().train_step(state, batch, cfg)
