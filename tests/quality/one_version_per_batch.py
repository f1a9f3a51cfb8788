"""Broken backend: every row of a step is labelled with the batch's newest policy version.

A trainer that stamps one version per optimizer batch (the sync assumption) mislabels the older groups of an
async batch that mixes ages (NeMo-RL's replay buffer; golden spec §10: a row's version is its last call's).
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
SCENARIO = "async-grpo-mixed-age-batch"


class Backend(ReferenceBackend):
    """Real rows all carry the highest generation version found in the batch."""

    name = "one-version-per-batch"

    def materialize(self, plans: Sequence[TracePlan], cfg: TrainerConfig) -> TraceBatch:
        batch = super().materialize(plans, cfg)
        versions = batch.row_generation_policy_version
        real = batch.parent_indices >= 0
        if not bool(real.any()):
            return batch
        stamped = torch.where(real, versions[real].max(), versions)
        return replace(batch, row_generation_policy_version=stamped)
