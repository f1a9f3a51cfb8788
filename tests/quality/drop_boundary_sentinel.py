"""Broken backend: the last token of a non-final physical trace keeps the decode placeholder route, not -1."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.core.trace_plan import TracePlan
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig

EXPECTED_CHECK = "row.sentinel"
SCENARIO = "image-compaction-k2-rolling"


class Backend(ReferenceBackend):
    """Boundary positions replay `arange(K)` (vLLM's unrepaired placeholder) instead of the sentinel."""

    name = "drop-boundary-sentinel"

    def materialize(self, plans: Sequence[TracePlan], cfg: TrainerConfig) -> TraceBatch:
        batch = super().materialize(plans, cfg)
        if batch.routed_experts is None:
            return batch
        routes = batch.routed_experts.clone()  # (R, S, L, K)
        placeholder = torch.arange(routes.shape[-1], dtype=routes.dtype)
        for row, positions in enumerate(batch.row_sentinel_positions):
            for p in positions:
                routes[row, p] = placeholder
        return replace(batch, routed_experts=routes, row_sentinel_positions=((),) * batch.num_rows)
