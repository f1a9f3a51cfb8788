"""Broken backend: Adam's moments used without bias correction (m and v instead of m/(1-β₁ᵗ) and v/(1-β₂ᵗ)).

Done by scaling the step's learning rate by (1-β₁ᵗ)/√(1-β₂ᵗ) for the `optimizer.step()` call
only, which cancels torch's correction; the scheduler's learning rate is left as it is. Early
steps then move the weights about ten times too little.
"""

from __future__ import annotations

import math

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState
from tests.quality._patching import step_with_group_changes

EXPECTED_CHECK = "train.update"
SCENARIO = "warmup-weight-decay-no-clip"


class Backend(ReferenceBackend):
    """Undoes the bias correction of the step about to be taken (t = the parameters' step count + 1)."""

    name = "adam-without-bias-correction"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        optimizer = state.optimizer

        def uncorrected(group: dict) -> dict:
            beta1, beta2 = group["betas"]
            first = optimizer.state.get(group["params"][0], {})
            t = int(first["step"]) + 1 if "step" in first else 1
            return {"lr": group["lr"] * (1 - beta1**t) / math.sqrt(1 - beta2**t)}

        with step_with_group_changes(optimizer, uncorrected):
            return super().train_step(state, batch, cfg)
