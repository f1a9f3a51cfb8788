"""Broken backend: a `train_step` that leaves out the trainer's refusals and trains a row over `max_total_sequence_length`.

The reference `materialize` builds rows without judging them against the policy's sequence limit or
router-replay setting; `train_step` refuses them first (`trainer.check_batch`). A backend that
replaces the step and forgets those checks trains what NeMo-RL refuses: the run "succeeds" where the
scenario expects `sequence_too_long`. An independent step written from the README did exactly this
before the README listed the refusals.
"""

from __future__ import annotations

from unittest.mock import patch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline import trainer as trainer_module
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "verdict.expected_error"
SCENARIO = "sequence-too-long"


class Backend(ReferenceBackend):
    """The reference step with its batch refusals switched off."""

    name = "trains-a-row-over-the-sequence-limit"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        with patch.object(trainer_module, "check_batch", lambda batch, cfg: None):
            return super().train_step(state, batch, cfg)
