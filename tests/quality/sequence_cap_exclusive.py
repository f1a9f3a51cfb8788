"""Broken backend: a row of exactly `policy.max_total_sequence_length` tokens is refused (`>=` for `>`).

NeMo-RL's cap is inclusive: only a longer sequence is too long (golden spec §7.7). `sequence-at-the-cap`
puts its longest row exactly at the cap, so the off-by-one refuses a batch that must train.
"""

from __future__ import annotations

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.core.errors import ContractError
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "verdict.unexpected_error"
SCENARIO = "sequence-at-the-cap"


class Backend(ReferenceBackend):
    """Refuses any real row whose length reaches the cap."""

    name = "sequence-cap-exclusive"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        cap = cfg.policy.max_total_sequence_length
        at_cap = (batch.row_input_lengths >= cap) & (batch.parent_indices >= 0)
        if bool(at_cap.any()):
            row = int(at_cap.nonzero()[0])
            raise ContractError("sequence_too_long", rollout_id=batch.row_logical_rollout_id[row],
                                detail=f"row {row} has {int(batch.row_input_lengths[row])} tokens; the cap is {cap}")
        return super().train_step(state, batch, cfg)
