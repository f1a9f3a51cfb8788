"""Broken backend: trainer logprobs read one position off (column t holds log p(ids[t+1] | ids[:t+1])).

The own-position layout (column t = log p(token t | tokens < t), nemo-rl-semantics §4.2) is mixed up with
the next-token frame: the trainer's logprob row is rolled left by one before the loss slices `[:, 1:]`,
so each trained token is scored by its successor's logprob (prev and curr alike, so the ratio stays 1).
"""

from __future__ import annotations

from unittest.mock import patch

import torch

from compactsim.harness.core.policy import TinyPolicy
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.gradient"
SCENARIO = "no-compaction"


class Backend(ReferenceBackend):
    name = "logprobs-next-position"

    def train_step(self, state, batch, cfg):
        original = TinyPolicy.token_logprobs

        def shifted(self_, input_ids, images=None, routes=None, lengths=None):
            lp = original(self_, input_ids, images, routes, lengths)
            return torch.cat([lp[:, 1:], torch.zeros_like(lp[:, :1])], dim=1)

        with patch.object(TinyPolicy, "token_logprobs", shifted):
            return super().train_step(state, batch, cfg)
