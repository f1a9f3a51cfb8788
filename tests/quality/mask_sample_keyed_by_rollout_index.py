"""Broken backend: the `mask_sample` flag is kept per rollout index, not per rollout, and applied in every group.

A trainer that tiles one group's instance configs over the repeated prompts (NeMo-RL repeats each prompt
`num_generations_per_prompt` times) reads the flag of generation i once and gives it to generation i of every
group. Where every group masks the same indices, as the catalogue's `mask_sample` list does, that is exactly
right; `mask-sample-one-group` masks rollout 1 of group 1 only, so group 0's rollout 1 loses its rows too.
"""

from __future__ import annotations

from dataclasses import replace

from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "row.sample_mask"
SCENARIO = "mask-sample-one-group"


class Backend(ReferenceBackend):
    name = "mask-sample-keyed-by-rollout-index"

    def materialize(self, plans, cfg):
        batch = super().materialize(plans, cfg)
        position: dict[int, int] = {}  # record index -> its position in its group (the batch is in group order)
        seen: dict[str, int] = {}
        for record in batch.logical:
            position[record.index] = seen.get(record.group_key, 0)
            seen[record.group_key] = position[record.index] + 1
        masked = {position[r.index] for r in batch.logical if r.mask_sample}
        sample = batch.row_sample_mask.clone()
        for record in batch.logical:
            if position[record.index] in masked:
                for r in record.row_indices:
                    sample[r] = 0.0
        return replace(batch, row_sample_mask=sample)
