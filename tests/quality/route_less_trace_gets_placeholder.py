"""Broken backend: a physical trace none of whose calls recorded routes is filled like a padding row.

The materializer writes the batch's route tensor row by row; for a trace with no routed call at all it has "no
routes for this row" and falls into the padding branch, `arange(K)` at every position, instead of backfilling -1
(the router decides). Only reachable with router replay off (replay on refuses route-less calls); the catalogue's
route-less call shares its trace with routed calls.
"""

from __future__ import annotations

from unittest.mock import patch

from compactsim.harness.pipeline import materializer as materializer_module
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.routes import fill_padding_routes

EXPECTED_CHECK = "row.route"
SCENARIO = "route-less-rollout-replay-off"

_fill = materializer_module.fill_trace_routes


def fill_trace_routes(out, calls, routes, *, is_final_trace):
    if all(r is None for r in routes):
        fill_padding_routes(out)  # BUG: treated as a padding row
        return ()
    return _fill(out, calls, routes, is_final_trace=is_final_trace)


class Backend(ReferenceBackend):
    name = "route-less-trace-gets-placeholder"

    def materialize(self, plans, cfg):
        with patch.object(materializer_module, "fill_trace_routes", fill_trace_routes):
            return super().materialize(plans, cfg)
