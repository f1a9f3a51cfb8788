"""Broken backend: each image slot's device buffer is re-filled only when the image's shape changes.

A trainer keeps one device tensor per (row, image slot) to avoid re-allocating pixel buffers every step, and meant
to re-allocate on a shape change and copy otherwise, but the copy sits inside the re-allocation branch: a later
step's screenshot of the same size in the same slot is trained on the pixels of the previous step's. The first step
(every buffer new) is right, and so is any run of one step; from the second step on, every row whose screenshots
changed but kept their size sees stale images, while the batch's own pixels (what the audit's row checks read) are
right.
"""

from __future__ import annotations

from unittest.mock import patch

import torch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "train.gradient"
SCENARIO = "no-clip-gradient-above-one"  # two steps: the second draws new screenshots of the same size


class Backend(ReferenceBackend):
    """Pixel buffers keyed by (row, slot), reloaded only when the shape or dtype differs."""

    name = "pixel-buffers-reused-by-shape"

    def __init__(self) -> None:
        self.buffers: dict[tuple[int, int], torch.Tensor] = {}

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        def row_images(batch_: TraceBatch, *, dtype: torch.dtype, device: torch.device) -> list[list[torch.Tensor]]:
            out: list[list[torch.Tensor]] = []
            for r, pixels in enumerate(batch_.row_pixel_values):
                row = []
                for k, px in enumerate(pixels):
                    buf = self.buffers.get((r, k))
                    if buf is None or buf.shape != px.shape or buf.dtype != dtype:
                        buf = self.buffers[(r, k)] = px.to(device=device, dtype=dtype)  # the copy only happens here
                    row.append(buf)
                out.append(row)
            return out

        with patch.object(T, "_row_images", row_images):
            return super().train_step(state, batch, cfg)
