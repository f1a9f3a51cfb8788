"""Broken backend: the training forward replays each token's route one position late (route of token t-1 at t).

The batch's routes are right (own-position layout, nemo-rl-semantics §2.5); the trainer slices them into
the next-token frame as it does the logprobs (`[:, :-1]`, shifted right), so every replayed expert belongs
to the previous token. prev and the trained forward agree with each other (ratio 1), so only the gradient,
computed through the wrong experts, shows it.
"""

from __future__ import annotations

from unittest.mock import patch

import torch

from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.gradient"
SCENARIO = "no-compaction"  # router replay on: every row's routes reach the training forward


class Backend(ReferenceBackend):
    name = "routes-shifted-in-training-forward"

    def train_step(self, state, batch, cfg):
        original = T._slice

        def shifted(batch_, rows, row_images, row_routes, device):
            mb = original(batch_, rows, row_images, row_routes, device)
            if mb.routes is None:
                return mb
            late = torch.cat([mb.routes[:, :1], mb.routes[:, :-1]], dim=1)
            return T._Microbatch(**{**{f: getattr(mb, f) for f in mb.__slots__}, "routes": late})

        with patch.object(T, "_slice", shifted):
            return super().train_step(state, batch, cfg)
