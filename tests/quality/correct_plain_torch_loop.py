"""A CORRECT backend: a plain PyTorch loop. Every rank's backward accumulates into one `.grad`, nothing fills
the gradient of a parameter no row reached (the image patch projection on a text-only batch), and AdamW
skips those parameters, as it skips any parameter whose `.grad` is None. The audit must pass it."""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._alt_trainer import Knobs, train_step

SCENARIO = "text-only-rollout"


class Backend(ReferenceBackend):
    name = "correct-plain_torch_loop"

    def train_step(self, state, batch, cfg):
        return train_step(state, batch, cfg, Knobs(allreduce="accumulate_sum", fill_missing_grads=False))
