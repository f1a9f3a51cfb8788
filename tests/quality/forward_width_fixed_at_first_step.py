"""Broken backend: the micro-batch forward runs at a sequence width fixed from the first step (static shapes).

A trainer that pads every micro-batch to one static width so a compiled or CUDA-graph-captured forward never sees a
new shape takes that width from the first batch it trains and cuts later micro-batches to it. While no later row is
longer than the first step's longest it changes nothing (the columns past a row's length are padding); once rollouts
grow between steps (more turns, longer answers), the tokens past the planned width are silently never trained, yet
still count in the loss normaliser. Only a run whose rows grow after the first step shows it.
"""

from __future__ import annotations

from unittest.mock import patch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "train.gradient"
SCENARIO = "rollouts-grow-after-step-0"


class Backend(ReferenceBackend):
    """Every micro-batch is cut to the widest micro-batch of the first step."""

    name = "forward-width-fixed-at-first-step"

    def __init__(self) -> None:
        self.width: int | None = None

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        if self.width is None:
            self.width = max(2, int(batch.row_input_lengths.max()))
        original, width = T._slice, self.width

        def static_slice(batch_, rows, row_images, row_routes, device):
            mb = original(batch_, rows, row_images, row_routes, device)
            if mb.width <= width:
                return mb
            return T._Microbatch(
                width=width, ids=mb.ids[:, :width], lengths=mb.lengths.clamp(max=width),
                token_mask=mb.token_mask[:, :width], sample_mask=mb.sample_mask, advantages=mb.advantages[:, :width],
                generation_logprobs=mb.generation_logprobs[:, :width],
                routes=None if mb.routes is None else mb.routes[:, :width], images=mb.images,
            )

        with patch.object(T, "_slice", static_slice):
            return super().train_step(state, batch, cfg)
