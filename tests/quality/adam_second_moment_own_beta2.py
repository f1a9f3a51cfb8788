"""Broken backend: a hand-written AdamW that keeps torch's state keys but advances its second moment with β2 = 0.95
while its param groups say 0.999 (a constant hard-coded in the update, the group's value never read).

Bias correction makes Adam's first update independent of β2, so on a one-step scenario the weights, the
first moment and the group's betas are all right; a resumed run would divide every later update by the
wrong second moment. Only the second moment shows it: `train.continuity` (it did not advance with the
group's β2 and the gradient the first moment applied).
"""

from __future__ import annotations

import functools

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState
from tests.quality._adamw import adamw_step

EXPECTED_CHECK = "train.continuity"
SCENARIO = "no-compaction"
HARD_CODED_BETA2 = 0.95


class Backend(ReferenceBackend):
    """Runs the reference step with its AdamW stepping by hand (`adamw_step`: torch's state keys, β2 = 0.95).

    Set on the instance: the LR scheduler has already wrapped the optimizer's bound `step` there.
    """

    name = "adam-second-moment-own-beta2"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        state.optimizer.step = functools.partial(adamw_step, state.optimizer, beta2=HARD_CODED_BETA2)
        return super().train_step(state, batch, cfg)
