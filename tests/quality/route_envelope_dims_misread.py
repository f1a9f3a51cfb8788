"""Broken backend: the `nrlre1` envelope's SxLxK header read as S x K x L.

`s, k, l = header.split("x")` then `reshape(s, l, k)`: the bytes stay in order, only the two inner dimensions trade
places. With 2 layers and top-2, every catalogue router shape before `45-router-shapes.yaml`, the result is the same
array; with 3 layers and top-2 the rows come out [2, 3], and the policy refuses routes of another layout.
"""

from __future__ import annotations

import numpy as np

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._patching import route_envelope_read_as

SCENARIO = "routes-nrlre1-three-layers-top2"


def _dims_misread(routes: np.ndarray) -> np.ndarray:
    s, layers, k = routes.shape
    return routes.reshape(s, k, layers)  # BUG: the header is S x L x K


class Backend(ReferenceBackend):
    name = "route-envelope-dims-misread"

    def plan(self, result):
        with route_envelope_read_as(_dims_misread):
            return super().plan(result)
