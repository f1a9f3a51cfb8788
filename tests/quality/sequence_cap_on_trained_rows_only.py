"""Broken backend: `policy.max_total_sequence_length` is judged on the rows the loss trains (sample_mask 1) only.

"A `mask_sample` row contributes nothing, so it need not fit": yet every real row still goes through the forward
passes, so an over-long row of a masked rollout runs instead of being refused. No catalogue scenario had an over-long
row in a `mask_sample` rollout before `sequence-too-long-mask-sample-row`.
"""

from __future__ import annotations

from dataclasses import replace
from unittest.mock import patch

import torch

from compactsim.harness.pipeline import trainer as trainer_module
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "verdict.expected_error"
SCENARIO = "sequence-too-long-mask-sample-row"

_check_batch = trainer_module.check_batch


def _check_trained_rows(batch, cfg) -> None:
    trained = batch.row_sample_mask > 0
    _check_batch(replace(batch, row_input_lengths=torch.where(trained, batch.row_input_lengths, 0)), cfg)


class Backend(ReferenceBackend):
    name = "sequence-cap-on-trained-rows-only"

    def check_batch(self, batch, cfg) -> None:
        _check_trained_rows(batch, cfg)

    def train_step(self, state, batch, cfg):
        with patch.object(trainer_module, "check_batch", _check_trained_rows):
            return super().train_step(state, batch, cfg)
