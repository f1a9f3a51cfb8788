"""Broken backend: the reference policy's logprobs are cached per batch row, keyed by the row's position and length.

The reference weights never change, so a trainer saves the reference forward by keeping each row's reference
logprobs and reusing them whenever a later batch has a row of the same length at the same position, as if a row
were the same rollout again. A run of one step, or of steps whose rows repeat word for word, is exactly right; once
the content of a row changes between steps at the same length (a policy that samples new tokens, scripted turns whose
tool arguments each step draws anew), the KL penalty is computed against another sequence's reference logprobs.
"""

from __future__ import annotations

from unittest.mock import patch

import torch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "train.loss"
SCENARIO = "kl-k3-unclamped"  # scripted, but each step samples its own tool arguments


class Backend(ReferenceBackend):
    """Reference logprobs of row r with length L are computed once and reused for every later (r, L)."""

    name = "reference-logprobs-cached-by-row-shape"

    def __init__(self) -> None:
        self.cache: dict[tuple[int, int], torch.Tensor] = {}

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        original = T._all_logprobs

        def cached(policy, batch_, microbatches, row_images, row_routes):
            out = original(policy, batch_, microbatches, row_images, row_routes)
            for r, length in enumerate(batch_.row_input_lengths.tolist()):
                key = (r, int(length))
                if key in self.cache and self.cache[key].shape == out[r].shape:
                    out[r] = self.cache[key]
                else:
                    self.cache[key] = out[r].clone()
            return out

        with patch.object(T, "_all_logprobs", cached):
            return super().train_step(state, batch, cfg)
