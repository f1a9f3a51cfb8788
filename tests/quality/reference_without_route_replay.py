"""Broken backend: the reference policy's logprobs are computed without router replay (its router decides).

The KL term then compares the policy under the recorded routes with a reference under different ones; NeMo-RL
computes the reference logprobs from the same `logprob_data`, routed experts included, as `prev` (§2.5, §3.4).
"""

from __future__ import annotations

from collections.abc import Sequence
from unittest.mock import patch

import torch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.core.policy import TinyPolicy
from compactsim.harness.pipeline import trainer as trainer_module
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "train.loss"
SCENARIO = "no-compaction"  # router replay and the default KL on: ref differs from step 0


class Backend(ReferenceBackend):
    """Drops the routes from the reference policy's logprob pass only; the policy's own passes replay them."""

    name = "reference-without-route-replay"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        all_logprobs = trainer_module._all_logprobs

        def logprobs(policy: TinyPolicy, batch_: TraceBatch, microbatches: Sequence[tuple[int, range]],
                     row_images: Sequence[list[torch.Tensor]], row_routes: torch.Tensor | None) -> torch.Tensor:
            if policy is state.reference:
                row_routes = None
            return all_logprobs(policy, batch_, microbatches, row_images, row_routes)

        # a separate reference pass at every step, as NeMo-RL runs it (the reference trainer leaves it out at step 0)
        with patch.object(trainer_module, "_all_logprobs", logprobs), \
                patch.object(trainer_module, "_same_weights", lambda a, b: False):
            return super().train_step(state, batch, cfg)
