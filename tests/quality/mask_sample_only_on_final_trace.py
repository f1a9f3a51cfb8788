"""Broken backend: a ``mask_sample`` rollout's sample mask is 0 on its final physical trace only; the rows of its
earlier traces keep sample_mask 1 and train.

NeMo-RL flags the rollout (``loss_multiplier`` 0 on its message log) and the PR zeroes the sample mask of every row
the rollout owns. A materializer that copies the flag from the rollout's *result* — which arrives with its last turn
— onto the row built from that turn leaves the traces compaction cut off earlier as ordinary rows: the masked
rollout still trains on most of its tokens, the valid counts grow by those rows, and without compaction (one row per
rollout) the masking is exactly right.
"""

from __future__ import annotations

from dataclasses import replace

from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "row.sample_mask"
SCENARIO = "mask-sample-rollouts"


class Backend(ReferenceBackend):
    name = "mask-sample-only-on-final-trace"

    def materialize(self, plans, cfg):
        batch = super().materialize(plans, cfg)
        sample = batch.row_sample_mask.clone()
        for record in batch.logical:
            if record.mask_sample:
                for r in record.row_indices[:-1]:  # the flag reached the final trace's row only
                    sample[r] = 1.0
        return replace(batch, row_sample_mask=sample)
