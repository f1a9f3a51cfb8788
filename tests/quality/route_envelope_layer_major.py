"""Broken backend: NeMo-RL's `nrlre1` route envelope decoded as if its bytes were layer-major.

The envelope's header says S x L x K and its bytes are row-major in that order (a token's layers, each its top-k).
Megatron keeps routes per layer, so a decoder written next to it reads the bytes as [L, S, K] and transposes them to
[S, L, K]: the shape is right, every id is some other token's or layer's. No valid envelope reached training before
`routes-nrlre1-envelope`, so a decoder bug of any kind passed the suite.
"""

from __future__ import annotations

import numpy as np

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._patching import route_envelope_read_as

EXPECTED_CHECK = "row.route"
SCENARIO = "routes-nrlre1-envelope"


def _layer_major(routes: np.ndarray) -> np.ndarray:
    s, layers, k = routes.shape
    return routes.reshape(layers, s, k).transpose(1, 0, 2).copy()  # BUG: the bytes are token-major


class Backend(ReferenceBackend):
    name = "route-envelope-layer-major"

    def plan(self, result):
        with route_envelope_read_as(_layer_major):
            return super().plan(result)
