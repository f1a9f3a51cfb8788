"""Broken backend: a row's policy version is never taken as more than one step behind the batch's newest.

A trainer written for `max_trajectory_age_steps: 1` derives a row's version as "this step's or the one
before": with groups two steps stale, their rows are labelled a version newer than the weights that
generated them, so staleness metrics and any version-keyed correction read one step too little. Every
scenario whose groups are at most one step old passes; only a batch holding a two-step-old group shows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.core.trace_plan import TracePlan
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig

EXPECTED_CHECK = "row.policy_version"
SCENARIO = "async-grpo-two-steps-stale"


class Backend(ReferenceBackend):
    """Real rows older than the batch's newest version minus one are relabelled to that version."""

    name = "staleness-capped-at-one-step"

    def materialize(self, plans: Sequence[TracePlan], cfg: TrainerConfig) -> TraceBatch:
        batch = super().materialize(plans, cfg)
        versions = batch.row_generation_policy_version
        real = batch.parent_indices >= 0
        if not bool(real.any()):
            return batch
        floor = versions[real].max() - 1
        capped = torch.where(real, torch.maximum(versions, floor), versions)
        return replace(batch, row_generation_policy_version=capped)
