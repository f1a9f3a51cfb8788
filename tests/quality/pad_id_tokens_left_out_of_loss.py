"""Broken backend: the trainer drops every position whose token id equals `policy.pad_token_id` from its loss mask
(``loss_mask = token_mask * (input_ids != pad_token_id)``), the HF-collator habit of masking labels that "are
padding" by value instead of by length.

With a dedicated pad token that never occurs in a row this changes nothing. With the common production setting
``pad_token_id == eos_token_id`` (Qwen's ``<|endoftext|>``/``<|im_end|>`` as pad) it silently stops training every
sampled end-of-turn / EOS token, so the policy never learns when to stop, and the global token count the loss is
divided by shrinks with it. NeMo-RL's token_loss_mask is 1 on *every* generated assistant token, the stop token
included (nemo-rl-semantics §5.3: "The end-of-turn or EOS token is trained if vLLM emitted it"); padding is
defined by the row length (`input_lengths`), never by token value (§2.5, §4.2). The batch and its artifact are
right; only the trainer's own mask and counts are wrong.
"""

from __future__ import annotations

from unittest.mock import patch

from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.gradient"
SCENARIO = "pad-token-is-turn-end"


class Backend(ReferenceBackend):
    name = "pad-id-tokens-left-out-of-loss"

    def train_step(self, state, batch, cfg):
        pad = cfg.policy.pad_token_id
        slice_, counts = T._slice, T.valid_counts

        def sliced(batch_, rows, row_images, row_routes, device):
            mb = slice_(batch_, rows, row_images, row_routes, device)
            mask = mb.token_mask * (mb.ids != pad).to(mb.token_mask.dtype)
            return T._Microbatch(**{**{f: getattr(mb, f) for f in mb.__slots__}, "token_mask": mask})

        def valid(token_mask, sample_mask):
            if token_mask is batch.row_token_mask:
                token_mask = token_mask * (batch.row_input_ids != pad).to(token_mask.dtype)
            return counts(token_mask, sample_mask)

        with patch.object(T, "_slice", sliced), patch.object(T, "valid_counts", valid):
            return super().train_step(state, batch, cfg)
