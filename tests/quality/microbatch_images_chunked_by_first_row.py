"""Broken backend: a micro-batch's images are handed back per row in chunks of its first row's image count.

A trainer that packs a micro-batch's screenshots as one `(B, N, 3, H, W)` tensor, N read off row 0, gives every row
N images. Right wherever a micro-batch's rows show equally many images, which every multi-row catalogue micro-batch
did; in `microbatch-rows-different-image-counts` rollout 1 sees two screenshots per observation, so its rows get
their neighbours' images or too few, which the policy's forward refuses (image tokens without their pixels).
"""

from __future__ import annotations

from dataclasses import replace
from unittest.mock import patch

from compactsim.harness.pipeline import trainer as trainer_module
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "verdict.unexpected_error"
SCENARIO = "microbatch-rows-different-image-counts"

_slice = trainer_module._slice


def _chunked_by_first_row(batch, rows, row_images, row_routes, device):
    micro = _slice(batch, rows, row_images, row_routes, device)
    flat = [image for row in micro.images for image in row]
    n = len(micro.images[0])
    return replace(micro, images=[flat[i * n:(i + 1) * n] for i in range(len(micro.images))])


class Backend(ReferenceBackend):
    name = "microbatch-images-chunked-by-first-row"

    def train_step(self, state, batch, cfg):
        with patch.object(trainer_module, "_slice", _chunked_by_first_row):
            return super().train_step(state, batch, cfg)
