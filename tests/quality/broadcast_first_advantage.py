"""Broken backend: the first logical rollout's advantage is written on every row's trainable tokens."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.core.trace_plan import TracePlan
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig

#: The audit finding this bug must provoke, and a catalogue scenario that shows it.
EXPECTED_CHECK = "row.advantage"
SCENARIO = "no-compaction"


class Backend(ReferenceBackend):
    """Every row gets `logical[0].advantage` (a per-batch broadcast instead of per-parent lookup)."""

    name = "broadcast-first-advantage"

    def materialize(self, plans: Sequence[TracePlan], cfg: TrainerConfig) -> TraceBatch:
        batch = super().materialize(plans, cfg)
        first = batch.logical[0].advantage
        return replace(batch, row_advantages=batch.row_token_mask.to(batch.row_advantages.dtype) * first)
