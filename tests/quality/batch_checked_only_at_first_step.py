"""Broken backend: the trainer's refusals (the sequence cap, mixed versions, router replay without routes) run on the
first batch only, as a start-up sanity check, and are skipped afterwards to save the pass over the batch.

Every scenario whose refusal fires at step 0 still ends in the right error, and every run of valid batches is
untouched; a rollout that grows past `policy.max_total_sequence_length` at a later step is trained silently (its row
over the limit, which NeMo-RL refuses rather than truncates) instead of ending the run.
"""

from __future__ import annotations

from unittest.mock import patch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "verdict.expected_error"
SCENARIO = "sequence-too-long-from-step-1"


class Backend(ReferenceBackend):
    """`check_batch` runs on the first batch this backend sees, never again."""

    name = "batch-checked-only-at-first-step"

    def __init__(self) -> None:
        self.checked = False

    def check_batch(self, batch: TraceBatch, cfg: TrainerConfig) -> None:
        if not self.checked:
            super().check_batch(batch, cfg)

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        if not self.checked:
            result = super().train_step(state, batch, cfg)
            self.checked = True
            return result
        with patch.object(T, "check_batch", lambda batch_, cfg_: None):
            return super().train_step(state, batch, cfg)
