"""A CORRECT backend: torch.nn.utils.clip_grad_norm_(foreach=True). The audit must pass it."""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._alt_trainer import Knobs, train_step

SCENARIO = "layout-dp2-kl-steps-clip-binds"


class Backend(ReferenceBackend):
    name = "correct-foreach_clip"

    def train_step(self, state, batch, cfg):
        return train_step(state, batch, cfg, Knobs(clip="torch_foreach"))
