"""Broken backend: the step leaves a NaN in one parameter (a diverged update), then reports normally.

In policy mode the harness then pushes those weights to the generation server, which refuses them
(422: a NaN logprob has no JSON). The run must keep the step's own audit finding (`train.update`
names the parameter) and end in the observed error ``weights_refused`` at that step, not in a
harness error that hides the step, nor in a 500 on every later model call.
"""

from __future__ import annotations

import torch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "train.update"
SCENARIO = "layout-dp2-kl-steps-clip-binds"  # policy mode, three steps: the push follows step 0


class Backend(ReferenceBackend):
    """The reference step, then `patch_pos[0, 0]` set to NaN."""

    name = "non-finite-weights"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        result = super().train_step(state, batch, cfg)
        with torch.no_grad():
            dict(state.policy.named_parameters())["patch_pos"].view(-1)[0] = float("nan")
        return result
