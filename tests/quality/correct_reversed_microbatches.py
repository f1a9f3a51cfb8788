"""A CORRECT backend: each rank accumulates its micro-batches in reverse order (a different summation order, same sum). The audit must pass it."""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._alt_trainer import Knobs, train_step

SCENARIO = "summary-compaction"  # four micro-batches on one rank, accumulated in reverse


class Backend(ReferenceBackend):
    name = "correct-reversed_microbatches"

    def train_step(self, state, batch, cfg):
        return train_step(state, batch, cfg, Knobs(reverse_microbatches=True))
