"""Broken backend: the trainer builds its loss mask from the row lengths (every token after the first), so the
prompt and tool-output tokens are trained too (NeMo-RL's token_loss_mask is 1 on generated assistant tokens
only, §5.3). The batch and its artifact are right; the trainer's own mask and counts are not.
"""

from __future__ import annotations

from unittest.mock import patch

import torch

from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.gradient"
SCENARIO = "summary-compaction"


def _length_mask(lengths: torch.Tensor, width: int, dtype: torch.dtype) -> torch.Tensor:
    mask = (torch.arange(width)[None, :] < lengths.cpu()[:, None]).to(dtype)
    mask[:, 0] = 0
    return mask


class Backend(ReferenceBackend):
    name = "prompt-tokens-in-loss-mask"

    def train_step(self, state, batch, cfg):
        slice_, counts = T._slice, T.valid_counts

        def sliced(batch_, rows, row_images, row_routes, device):
            mb = slice_(batch_, rows, row_images, row_routes, device)
            mask = _length_mask(mb.lengths, mb.width, mb.token_mask.dtype).to(mb.token_mask.device)
            first = mb.advantages.abs().argmax(dim=1, keepdim=True)  # the row's advantage, wherever it sits
            adv = mb.advantages.gather(1, first) * mask
            return T._Microbatch(**{**{f: getattr(mb, f) for f in mb.__slots__}, "token_mask": mask, "advantages": adv})

        def valid(token_mask, sample_mask):
            if token_mask is batch.row_token_mask:
                token_mask = _length_mask(batch.row_input_lengths, token_mask.shape[1], token_mask.dtype)
            return counts(token_mask, sample_mask)

        with patch.object(T, "_slice", sliced), patch.object(T, "valid_counts", valid):
            return super().train_step(state, batch, cfg)
