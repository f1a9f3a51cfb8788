"""Broken backend: the number of padding rows is taken from the first step and reused at every later step.

A trainer that keeps its first batch's layout (how many trailing rows are dp / micro-batch padding) treats the last
that-many rows of every later batch as padding (sample_mask 0). Right wherever every step pads the same number of
rows, which every multi-step catalogue scenario did; `padding-shrinks-after-step-0` pads one row at step 0 and none
at step 1, whose last real row then silently leaves the loss.
"""

from __future__ import annotations

from dataclasses import replace

from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "row.sample_mask"
SCENARIO = "padding-shrinks-after-step-0"


class Backend(ReferenceBackend):
    name = "padding-count-fixed-at-first-step"

    def __init__(self) -> None:
        self.padding_rows: int | None = None

    def train_step(self, state, batch, cfg):
        if self.padding_rows is None:
            self.padding_rows = int((batch.parent_indices < 0).sum())
        if self.padding_rows:
            sample = batch.row_sample_mask.clone()
            sample[batch.num_rows - self.padding_rows:] = 0
            batch = replace(batch, row_sample_mask=sample)
        return super().train_step(state, batch, cfg)
