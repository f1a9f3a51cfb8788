"""A CORRECT backend: Megatron-style: backward of each micro-batch's un-normalised token sum (loss x (N + 1e-8)), the gradients divided by N + 1e-8 once before clipping. The audit must pass it."""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._alt_trainer import Knobs, train_step

SCENARIO = "layout-dp2-kl-steps-clip-binds"


class Backend(ReferenceBackend):
    name = "correct-megatron_divide_once"

    def train_step(self, state, batch, cfg):
        return train_step(state, batch, cfg, Knobs(divide_once=True))
