"""A CORRECT backend: one backward per rank of the summed micro-batch losses (each already divided by the global token count) instead of one backward per micro-batch. The audit must pass it."""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._alt_trainer import Knobs, train_step

SCENARIO = "summary-compaction"  # four micro-batches on one rank summed into one backward


class Backend(ReferenceBackend):
    name = "correct-summed_rank_loss"

    def train_step(self, state, batch, cfg):
        return train_step(state, batch, cfg, Knobs(backward="per_rank_sum"))
