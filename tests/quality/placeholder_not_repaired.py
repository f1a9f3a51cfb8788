"""Broken backend: each call's routes are copied as recorded, so a call's final token keeps vLLM's decode placeholder.

NeMo-RL repairs that row from the next call's prefill (`previous_routes[-1] = routed_experts[len(seen) - 1]`,
nemo-rl-semantics §1.6; golden spec §11 rule 2). Without the repair, router replay feeds `arange(K)` at every
call's final token inside a trace. The boundary sentinels are still right, so only the route comparison sees it.
"""

from __future__ import annotations

from collections.abc import Sequence
from unittest.mock import patch

import numpy as np

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.core.trace_plan import TracePlan
from compactsim.harness.pipeline import materializer as materializer_module
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig

EXPECTED_CHECK = "row.route"
SCENARIO = "layout-dp2-microbatch2-mask-sample"  # each rollout's first trace holds three calls: two end inside it


def _fill_without_repair(out: np.ndarray, calls: Sequence, routes: Sequence, *, is_final_trace: bool) -> tuple[int, ...]:
    """Each call's own rows for the tokens it added; only the boundary sentinel of the reference survives."""
    done = 0
    for call, r in zip(calls, routes, strict=True):
        out[done:call.num_tokens] = -1 if r is None else r[done:call.num_tokens]
        done = call.num_tokens
    if not is_final_trace and done > 0:
        out[done - 1] = -1
        return (done - 1,)
    return ()


class Backend(ReferenceBackend):
    """The reference materializer with the repair step left out."""

    name = "placeholder-not-repaired"

    def materialize(self, plans: Sequence[TracePlan], cfg: TrainerConfig) -> TraceBatch:
        with patch.object(materializer_module, "fill_trace_routes", _fill_without_repair):
            return super().materialize(plans, cfg)
