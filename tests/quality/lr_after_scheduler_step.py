"""Broken backend (misreporting): ``lr`` is read from the param group after ``scheduler.step()`` — the rate the
*next* step will use — instead of the rate this step's update applied.

NeMo-RL's workers log the learning rate the optimizer stepped with (README "What the audit compares": the rate "in the
param groups before the step, as reported"). During an LR warmup the two differ at every step, so the logged schedule
runs one step ahead of the one that trained. Training is the reference's.
"""

from __future__ import annotations

from compactsim.harness.core import metrics as M
from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._patching import with_metrics

EXPECTED_CHECK = "train.lr"
SCENARIO = "warmup-weight-decay-no-clip"


class Backend(ReferenceBackend):
    name = "lr-after-scheduler-step"

    def train_step(self, state, batch, cfg):
        result = super().train_step(state, batch, cfg)
        return with_metrics(result, {M.LR: float(state.optimizer.param_groups[0]["lr"])})
