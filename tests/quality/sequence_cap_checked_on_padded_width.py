"""Broken backend: the sequence cap is checked on the padded batch width, ``input_ids.shape[1] >
policy.max_total_sequence_length``, after the rows were right-padded to a multiple of
``policy.make_sequence_length_divisible_by`` (the assert a worker puts on the tensor it receives).

With divisibility 1 the padded width is the longest real row and the check is NeMo-RL's. With divisibility 64 (a
common setting for tensor-parallel/FP8 kernels) a batch whose longest row sits at or just under the cap is
padded past it and refused as `sequence_too_long`, though no row is too long: a run that trains in NeMo-RL stops
here. The cap is on each real sequence and inclusive (README "Checking another trainer": "a real row longer than
policy.max_total_sequence_length"; golden spec §7.7); padding positions never reach the model's context limit
as tokens of a sequence.
"""

from __future__ import annotations

from compactsim.harness.core.errors import ContractError
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "verdict.unexpected_error"
SCENARIO = "sequence-cap-with-padding-multiple"


class Backend(ReferenceBackend):
    name = "sequence-cap-checked-on-padded-width"

    def _refuse_wide(self, batch, cfg):
        width, cap = int(batch.row_input_ids.shape[1]), cfg.policy.max_total_sequence_length
        if width > cap:
            row = int(batch.row_input_lengths.argmax())
            raise ContractError("sequence_too_long", rollout_id=batch.row_logical_rollout_id[row],
                                detail=f"batch width {width} exceeds policy.max_total_sequence_length {cap}")

    def check_batch(self, batch, cfg):
        super().check_batch(batch, cfg)
        self._refuse_wide(batch, cfg)

    def train_step(self, state, batch, cfg):
        self._refuse_wide(batch, cfg)
        return super().train_step(state, batch, cfg)
