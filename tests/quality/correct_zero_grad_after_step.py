"""A CORRECT backend: optimizer.zero_grad(set_to_none=False) after optimizer.step() instead of zero_grad(set_to_none=True) before the backward. The audit must pass it."""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._alt_trainer import Knobs, train_step

SCENARIO = "warmup-weight-decay-no-clip"  # three steps with warmup and decay, a quarter the cost of scripted-three-steps


class Backend(ReferenceBackend):
    name = "correct-zero_grad_after_step"

    def train_step(self, state, batch, cfg):
        return train_step(state, batch, cfg, Knobs(zero_grad_set_to_none=False, zero_grad_after_step=True))
