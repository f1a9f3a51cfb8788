"""Broken backend: a micro-batch's sample mask is its first row's flag given to every real row of it.

Right wherever a micro-batch holds rows of one rollout, or of rollouts with the same flag, which every catalogue
mask_sample scenario had (`layout-dp2-microbatch2-mask-sample`: two rows per rollout, two-row micro-batches).
`microbatch-mixes-mask-sample-rows` has three rows per rollout, so a micro-batch holds a trained row and a masked one.
"""

from __future__ import annotations

from dataclasses import replace
from unittest.mock import patch

from compactsim.harness.pipeline import trainer as trainer_module
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.loss"
SCENARIO = "microbatch-mixes-mask-sample-rows"


class Backend(ReferenceBackend):
    name = "microbatch-sample-mask-from-first-row"

    def train_step(self, state, batch, cfg):
        original = trainer_module._slice

        def first_row_flag(batch_, rows, row_images, row_routes, device):
            micro = original(batch_, rows, row_images, row_routes, device)
            real = (batch_.parent_indices[rows.start:rows.stop] >= 0).to(micro.sample_mask.device)
            sample = micro.sample_mask.clone()
            sample[real] = sample[0]
            return replace(micro, sample_mask=sample)

        with patch.object(trainer_module, "_slice", first_row_flag):
            return super().train_step(state, batch, cfg)
