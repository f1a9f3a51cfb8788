"""Broken backend: the all-reduce averages over the ranks that hold a real row only, as DDP's Join context divides by
the ranks still joined, where FSDP's mean over every rank (undone by the loss's × dp_size) is NeMo-RL's.

With three rows over four ranks the last rank holds only a padding row: its zero gradient is left out of
the mean, so the step's gradient is 4/3 of the right one. Every catalogue layout gave each rank a real
row until `layout-dp4-padding-rank`; there the gradient norm before clipping is 4/3 the oracle's
(`train.grad_norm`; clipping to 1.0 leaves the applied gradient off by rounding only, still past
float64's bound: `train.gradient` too).
"""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._alt_trainer import Knobs, train_step

EXPECTED_CHECK = "train.grad_norm"
SCENARIO = "layout-dp4-padding-rank"


class Backend(ReferenceBackend):
    name = "allreduce-mean-over-ranks-with-rows"

    def train_step(self, state, batch, cfg):  # noqa: ANN001, ANN201 - the backend protocol's signature
        return train_step(state, batch, cfg, Knobs(allreduce="mean_over_ranks_with_rows"))
