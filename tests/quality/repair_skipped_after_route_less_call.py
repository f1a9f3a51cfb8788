"""Broken backend: a call's final token is repaired from the next call's prefill only when it holds the placeholder.

vLLM's final decode row is the placeholder `arange(K)`; the engineer repairs "the placeholder" literally, replacing
the previous call's final row only where it still is `arange(K)`. A call that recorded no routes was backfilled with
-1 (router replay off), so its final token keeps -1 although the next call's prefill holds its real route. Every
catalogue route-less call is the last of its trace (its final token is the boundary sentinel anyway), so the skipped
repair never showed.
"""

from __future__ import annotations

from unittest.mock import patch

import numpy as np

from compactsim.harness.core.batch import MISSING_ROUTE_SENTINEL
from compactsim.harness.pipeline import materializer as materializer_module
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "row.sentinel"
SCENARIO = "route-less-call-inside-a-trace-replay-off"


def fill_trace_routes(out, calls, routes, *, is_final_trace):
    done = 0
    for call, r in zip(calls, routes, strict=True):
        end = call.num_tokens
        if r is None:
            out[done:end] = MISSING_ROUTE_SENTINEL
        else:
            out[done:end] = r[done:end]
        if done > 0:
            if r is None:
                out[done - 1] = MISSING_ROUTE_SENTINEL
            elif np.array_equal(out[done - 1], np.broadcast_to(np.arange(out.shape[-1]), out.shape[1:])):
                out[done - 1] = r[done - 1]  # BUG: only a placeholder row is repaired; a backfilled -1 stays
        done = end
    if not is_final_trace and done > 0:
        out[done - 1] = MISSING_ROUTE_SENTINEL
        return (done - 1,)
    return ()


class Backend(ReferenceBackend):
    name = "repair-skipped-after-route-less-call"

    def materialize(self, plans, cfg):
        with patch.object(materializer_module, "fill_trace_routes", fill_trace_routes):
            return super().materialize(plans, cfg)
