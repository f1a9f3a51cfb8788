"""A CORRECT backend: Megatron's clip written out: total L2 norm, gradients scaled by max/(norm + 1e-6) only when that is below 1; lr reported from scheduler.get_last_lr(). The audit must pass it."""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._alt_trainer import Knobs, train_step

SCENARIO = "layout-dp2-kl-steps-clip-binds"


class Backend(ReferenceBackend):
    name = "correct-clip_by_hand"

    def train_step(self, state, batch, cfg):
        return train_step(state, batch, cfg, Knobs(clip="by_hand", lr_from_scheduler=True))
