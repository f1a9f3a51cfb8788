"""Broken backend: AdamW with betas (0.9, 0.95), a common LLM-pretraining choice, where the run's AdamW keeps (0.9, 0.999).

Bias correction makes Adam's first update independent of β2, so a one-step scenario's weights come
out right and only the second moment (used from the next step on) is wrong. The audit reads the
betas from the optimizer's param groups (`train.update`) at the step where they first differ.
"""

from __future__ import annotations

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "train.update"
SCENARIO = "layout-dp2-microbatch2-mask-sample"  # the betas are read from the param groups at step 0


class Backend(ReferenceBackend):
    """Sets every param group's betas to (0.9, 0.95) before stepping."""

    name = "adam-beta2-095"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        for group in state.optimizer.param_groups:
            group["betas"] = (0.9, 0.95)
        return super().train_step(state, batch, cfg)
