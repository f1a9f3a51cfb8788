"""A CORRECT backend: prev and reference logprobs from one forward over every row at the batch's full width, not in the micro-batch layout. The audit must pass it."""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._alt_trainer import Knobs, train_step

SCENARIO = "kl-mask-sample-steps"  # reference logprobs (k2 KL) over three rows of uneven length


class Backend(ReferenceBackend):
    name = "correct-prev_full_batch"

    def train_step(self, state, batch, cfg):
        return train_step(state, batch, cfg, Knobs(prev_full_batch=True))
