"""A CORRECT backend: logprobs as -cross_entropy(logits, next ids) instead of log_softmax + gather. The audit must pass it."""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._alt_trainer import Knobs, train_step

SCENARIO = "importance-sampling-correction"


class Backend(ReferenceBackend):
    name = "correct-cross_entropy_logprobs"

    def train_step(self, state, batch, cfg):
        return train_step(state, batch, cfg, Knobs(logprobs="cross_entropy"))
