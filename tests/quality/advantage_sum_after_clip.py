"""Broken backend: `advantages/sum` is logged from the clipped advantages the rows carry.

NeMo-RL logs it before `_clip_grpo_advantages` (nemo-rl-semantics §3.7: logged at grpo.py:3305, clipped at
3321); the rows, the loss and `advantages/mean|min|max` are unaffected, so only the metric shows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.core.trace_plan import TracePlan
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig

EXPECTED_CHECK = "metric.exact"
SCENARIO = "advantage-clip-high-only"


class Backend(ReferenceBackend):
    """Forgets each rollout's unclipped advantage, so the sum adds up the clipped ones."""

    name = "advantage-sum-after-clip"

    def materialize(self, plans: Sequence[TracePlan], cfg: TrainerConfig) -> TraceBatch:
        batch = super().materialize(plans, cfg)
        return replace(batch, logical=tuple(replace(r, unclipped_advantage=None) for r in batch.logical))
