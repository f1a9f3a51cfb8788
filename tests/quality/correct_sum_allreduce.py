"""A CORRECT backend: every rank accumulates into one .grad without the loss x dp_size scaling: a SUM all-reduce instead of FSDP's mean undone by x dp_size. The audit must pass it."""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._alt_trainer import Knobs, train_step

SCENARIO = "layout-dp4-microbatch1"


class Backend(ReferenceBackend):
    name = "correct-sum_allreduce"

    def train_step(self, state, batch, cfg):
        return train_step(state, batch, cfg, Knobs(allreduce="accumulate_sum"))
