"""A CORRECT backend: padding rows in NeMo-RL's trace-batch shape, one pad token each (false-positive hunt 4).

NeMo-RL's trace batch writes every padding row as a single pad token: `input_lengths == 1`, zero token mask and
advantage, `sample_mask` 0 (the PR reference's facts; docs/golden-spec.md §12 and the audit's `padding.weight` allow
it). Such a row weighs nothing. A `TraceBatch` used to refuse any padding row with a non-zero length, so an adapter
building its batch NeMo's way failed every scenario with padding rows with a `backend.error`, although
`compactsim verify` passed the same rows.
"""

from __future__ import annotations

from dataclasses import replace

from compactsim.harness.pipeline.backend import ReferenceBackend

SCENARIO = "layout-dp2-microbatch2-mask-sample"


class Backend(ReferenceBackend):
    name = "fp-nemo-padding-rows"

    def materialize(self, plans, cfg):
        batch = super().materialize(plans, cfg)  # padding rows already hold pad_token_id at every position
        lengths = batch.row_input_lengths.clone()
        lengths[batch.parent_indices < 0] = 1
        return replace(batch, row_input_lengths=lengths)
