"""Broken backend: the `nrlre1` envelope's SxLxK header read as S x K x L.

`s, k, l = header.split("x")` then `reshape(s, l, k)`: the bytes stay in order, only the two inner dimensions trade
places. With 2 layers and top-2, every catalogue router shape before `45-router-shapes.yaml`, the result is the same
array; with 3 layers and top-2 the rows come out [2, 3], and the policy refuses routes of another layout.
"""

from __future__ import annotations

from unittest.mock import patch

from compactsim.harness.pipeline import ingest
from compactsim.harness.pipeline.backend import ReferenceBackend

SCENARIO = "routes-nrlre1-three-layers-top2"

_decode = ingest._decode_route_envelope


def _dims_misread(text, turn_id, violations):
    routes = _decode(text, turn_id, violations)
    if routes is None:
        return None
    s, layers, k = routes.shape
    return routes.reshape(s, k, layers)  # BUG: the header is S x L x K


class Backend(ReferenceBackend):
    name = "route-envelope-dims-misread"

    def plan(self, result):
        with patch.object(ingest, "_decode_route_envelope", _dims_misread):
            return super().plan(result)
