"""A CORRECT backend (false-positive hunt 5): replayed routes sorted by expert id within each (token, layer) before the forward (a routing-map replay, Megatron-style, is order-free); the batch's routes reported as used."""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality.fp5_step import Opts, train_step

SCENARIO = "layout-dp2-kl-steps-clip-binds"


class Backend(ReferenceBackend):
    name = "fp5-sorted_routes"

    def train_step(self, state, batch, cfg):
        return train_step(state, batch, cfg, Opts(sort_routes=True))
