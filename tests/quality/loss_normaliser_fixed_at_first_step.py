"""Broken backend: the loss normaliser (the batch's valid-token count) is computed at the first step and kept.

A loss module written for fixed-size batches works out ``global_valid_toks`` (and ``global_valid_seqs``) on its first
call and stores them, as if every logical batch trained as many tokens. While every step trains the same number of
tokens (scripted rollouts repeat; compaction splits rows without changing which tokens train) it is exactly right;
once the rollouts of a later step are longer or shorter, every micro-batch loss is divided by the first step's count,
scaling that step's gradient by the ratio of the two. Only a run whose trained-token count changes between steps
shows it.
"""

from __future__ import annotations

from unittest.mock import patch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "train.loss"
SCENARIO = "rollouts-shrink-after-step-0"


class Backend(ReferenceBackend):
    """The first step's valid counts normalise every later step."""

    name = "loss-normaliser-fixed-at-first-step"

    def __init__(self) -> None:
        self.counts = None

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        original = T.valid_counts

        def cached(token_mask, sample_mask):
            if self.counts is None:
                self.counts = original(token_mask, sample_mask)
            return self.counts

        with patch.object(T, "valid_counts", cached):
            return super().train_step(state, batch, cfg)
