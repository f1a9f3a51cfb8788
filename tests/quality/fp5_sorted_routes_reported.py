"""A CORRECT backend (false-positive hunt 5): as fp5_sorted_routes, and the sorted routes reported as the routes used."""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality.fp5_step import Opts, train_step

SCENARIO = "router-one-layer-top3-microbatch"  # top-3: sorted ids differ from the wire order


class Backend(ReferenceBackend):
    name = "fp5-sorted_routes_reported"

    def train_step(self, state, batch, cfg):
        return train_step(state, batch, cfg, Opts(sort_routes=True, report_sorted_routes=True))
