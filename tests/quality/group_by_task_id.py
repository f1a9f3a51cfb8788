"""Broken backend: GRPO groups are keyed by the contract's task_id (NeMo-RL's task identity), ignoring group_id.

Two groups of one step that draw the same task (sampling with replacement, a small dataset, several
epochs per step) merge into one group of 2n for the baseline. Rule: golden-spec §8 "Group key of a
rollout: the contract's `group_id`, else its `task_id`, else ... its rollout id".
"""

from __future__ import annotations

from collections.abc import Sequence

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.core.trace_plan import TracePlan
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from tests.quality._patching import materialized_with_groups_by

#: The audit finding this bug must provoke, and a catalogue scenario that shows it.
EXPECTED_CHECK = "row.advantage"
SCENARIO = "shared-task-groups"


class Backend(ReferenceBackend):
    """Baselines over every rollout of a task id (the group id only when a rollout has no task id)."""

    name = "group-by-task-id"

    def materialize(self, plans: Sequence[TracePlan], cfg: TrainerConfig) -> TraceBatch:
        return materialized_with_groups_by(plans, cfg, key=lambda e: str(e.task_id or e.group_key))
