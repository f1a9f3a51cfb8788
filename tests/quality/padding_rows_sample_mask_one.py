"""Broken backend: dp padding rows get sample_mask 1 (copied from the row they pad after) instead of 0.

NeMo-RL's padding rows (`maybe_pad_last_batch`, §3.6) repeat a row with sample_mask 0; a padding row with
mask 1 is an empty sequence counted as a valid sample: global_valid_seqs / num_valid_samples grow, and
under sequence-level normalisations it would dilute the loss. Its tokens are all masked, so a
token-level loss is unchanged.
"""

from __future__ import annotations

from dataclasses import replace

from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "backend.error"  # TraceBatch refuses a padding row with sample_mask != 0
SCENARIO = "multi-group-padding"


class Backend(ReferenceBackend):
    name = "padding-rows-sample-mask-one"

    def materialize(self, plans, cfg):
        batch = super().materialize(plans, cfg)
        mask = batch.row_sample_mask.clone()
        mask[batch.parent_indices < 0] = 1.0
        return replace(batch, row_sample_mask=mask)
