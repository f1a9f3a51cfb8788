"""Broken backend: after a compaction boundary the trainer feeds a row the images of the rollout's previous trace.

The batch attaches each row's own pixels (`row_pixel_values`); the trainer caches pixels per logical
rollout and, for a later trace holding as many images as the one before, reuses that trace's tensors
(a cache keyed by rollout and image count). Same count, same shapes, no error: wrong screenshots.
"""

from __future__ import annotations

from unittest.mock import patch

from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.gradient"
SCENARIO = "image-modes"  # K=1 boundaries: each later trace shows as many images as the one before


class Backend(ReferenceBackend):
    name = "images-of-previous-trace"

    def train_step(self, state, batch, cfg):
        original = T._row_images

        def cached(batch_, *, dtype, device):
            rows = original(batch_, dtype=dtype, device=device)
            cache: dict[tuple[str | None, int], list] = {}
            out = []
            for r, images in enumerate(rows):
                key = (batch_.row_logical_rollout_id[r], len(images))
                out.append(cache.setdefault(key, images))
            return out

        with patch.object(T, "_row_images", cached):
            return super().train_step(state, batch, cfg)
