"""Broken backend: the tokens of a call that recorded no routes are backfilled with expert 0, not -1.

-1 lets the router decide at replay; 0 forces every layer onto expert 0. With router replay off
the trainer replays nothing, but the batch still carries the routes it would replay, and the audit
compares them as the golden files do (§11 rules 1-2).
"""

from __future__ import annotations

from collections.abc import Sequence
from unittest.mock import patch

import numpy as np

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.core.trace_plan import TracePlan
from compactsim.harness.pipeline import materializer as materializer_module
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.routes import fill_trace_routes
from compactsim.harness.pipeline.train_config import TrainerConfig

EXPECTED_CHECK = "row.route"
SCENARIO = "fault-no-routes-replay-off"


def _zero_backfill(out: np.ndarray, calls, routes, *, is_final_trace: bool) -> tuple[int, ...]:
    sentinels = fill_trace_routes(out, calls, routes, is_final_trace=is_final_trace)
    done = 0
    for call, r in zip(calls, routes, strict=True):
        if r is None:  # the call's own tokens; its last one stays as the reference left it
            out[done:max(done, call.num_tokens - 1)] = 0
        done = call.num_tokens
    return sentinels


class Backend(ReferenceBackend):
    name = "route-less-calls-backfilled-with-zero"

    def materialize(self, plans: Sequence[TracePlan], cfg: TrainerConfig) -> TraceBatch:
        with patch.object(materializer_module, "fill_trace_routes", _zero_backfill):
            return super().materialize(plans, cfg)
