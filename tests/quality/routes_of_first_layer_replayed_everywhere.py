"""Broken backend: router replay feeds every MoE layer the routes recorded for layer 0.

The routes travel as ``[rows, tokens, layers, topk]``; a replay hook that indexes them by the layer's position
*within its pipeline stage* (Megatron's local layer number) rather than by its global layer number replays layer 0's
experts in the first layer of every stage — with one MoE layer per stage, in every layer. The batch's routes, its
sentinels and its repairs are all right, the routes are still "replayed", and the expert ids are valid, so nothing
fails; the trained forward just runs other experts than the ones that generated the tokens.
"""

from __future__ import annotations

from unittest.mock import patch

from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.gradient"
SCENARIO = "layout-dp2-microbatch2-mask-sample"  # router replay on over every MoE layer

_SLICE = T._slice


def _first_layer_everywhere(batch, rows, row_images, row_routes, device):
    mb = _SLICE(batch, rows, row_images, row_routes, device)
    if mb.routes is None:
        return mb
    local = mb.routes[:, :, :1].expand_as(mb.routes).contiguous()  # (mb, W, L, K): layer 0's ids in every layer
    return T._Microbatch(**{**{f: getattr(mb, f) for f in mb.__slots__}, "routes": local})


class Backend(ReferenceBackend):
    name = "routes-of-first-layer-replayed-everywhere"

    def train_step(self, state, batch, cfg):
        with patch.object(T, "_slice", _first_layer_everywhere):
            return super().train_step(state, batch, cfg)
