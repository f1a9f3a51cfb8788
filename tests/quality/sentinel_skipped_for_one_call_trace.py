"""Broken backend: when the rollout's first call ends a physical trace, its last token keeps the decode placeholder.

A route filler that walks the rollout's calls once and stamps the -1 boundary sentinel inside the branch that repairs
the previous call's last token (`if i > 0:`) stamps every boundary but one: the boundary right after the rollout's
first call. Only a first physical trace of a single call has that boundary, and no catalogue scenario had one before
`first-trace-of-one-call`, where dropping the unprotected task image at turn 2 cuts the first trace after turn 1.
Later one-call traces (`image-compaction-k2-rolling`) come out right.
"""

from __future__ import annotations

from collections.abc import Sequence
from unittest.mock import patch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.core.trace_plan import TracePlan
from compactsim.harness.pipeline import materializer as materializer_module
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.routes import fill_trace_routes
from compactsim.harness.pipeline.train_config import TrainerConfig

EXPECTED_CHECK = "row.sentinel"
SCENARIO = "first-trace-of-one-call"


#: the rollout's first model call (turns count from 1; turn 0 holds the seed observations)
FIRST_TURN = 1


def _sentinel_only_after_a_repair(out, calls, routes, *, is_final_trace: bool) -> tuple[int, ...]:
    only_the_first_call = len(calls) == 1 and calls[0].turn_id == FIRST_TURN
    return fill_trace_routes(out, calls, routes, is_final_trace=is_final_trace or only_the_first_call)


class Backend(ReferenceBackend):
    name = "sentinel-skipped-for-one-call-trace"

    def materialize(self, plans: Sequence[TracePlan], cfg: TrainerConfig) -> TraceBatch:
        with patch.object(materializer_module, "fill_trace_routes", _sentinel_only_after_a_repair):
            return super().materialize(plans, cfg)
