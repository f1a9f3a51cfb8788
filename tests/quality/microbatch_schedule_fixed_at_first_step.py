"""Broken backend: the micro-batch schedule is planned once, from the first step's batch, and replayed after.

A trainer that fixes its per-rank micro-batch count up front (a static pipeline schedule, buffers or a captured
graph sized on the first batch) trains every later step through that many micro-batches per rank. While every step
holds as many rows it is right; once compaction starts splitting rollouts the batch grows, and the micro-batches past
the planned count are silently never run: their rows keep their advantages and counts in the normaliser, but no
gradient. Only a scenario whose row count changes between steps shows it.
"""

from __future__ import annotations

from unittest.mock import patch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "train.gradient"
SCENARIO = "compaction-from-step-1"


class Backend(ReferenceBackend):
    """Each rank runs at most as many micro-batches as it had at the first step."""

    name = "microbatch-schedule-fixed-at-first-step"

    def __init__(self) -> None:
        self.planned: int | None = None

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        if self.planned is None:
            self.planned = max(len(batch.microbatch_rows(rank)) for rank in range(batch.dp_size))
        original, planned = TraceBatch.microbatch_rows, self.planned

        def scheduled(self_: TraceBatch, dp_rank: int) -> tuple[range, ...]:
            return original(self_, dp_rank)[:planned]

        with patch.object(TraceBatch, "microbatch_rows", scheduled):
            return super().train_step(state, batch, cfg)
