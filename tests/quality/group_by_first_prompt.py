"""Broken backend: GRPO groups are formed by the first-turn prompt tokens, ignoring the contract's group id.

NeMo-RL's `calculate_baseline_and_std_per_prompt` groups identical first-turn prompts
(nemo-rl-semantics §3.2: "Two distinct tasks whose first prompts tokenize identically would merge");
a trainer that keeps that for contract rollouts merges two groups of one step that share a prompt
(the same task drawn twice), so their baselines are computed over 2n rollouts. Rule: golden-spec §8,
the group key is the contract's `group_id`, else its `task_id`; never the prompt tokens.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.core.evidence import RolloutEvidence
from compactsim.harness.core.trace_plan import TracePlan
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from tests.quality._patching import materialized_with_groups_by

#: The audit finding this bug must provoke, and a catalogue scenario that shows it.
EXPECTED_CHECK = "row.advantage"
SCENARIO = "shared-task-groups"


def _first_prompt_key(e: RolloutEvidence) -> str:
    if not e.calls:
        return e.rollout_id
    ids = json.dumps(list(e.calls[0].prompt_token_ids), separators=(",", ":"))
    return "prompt-" + hashlib.sha256(ids.encode("ascii")).hexdigest()[:16]


class Backend(ReferenceBackend):
    """Baselines over every rollout whose first call sent the same prompt tokens."""

    name = "group-by-first-prompt"

    def materialize(self, plans: Sequence[TracePlan], cfg: TrainerConfig) -> TraceBatch:
        return materialized_with_groups_by(plans, cfg, key=_first_prompt_key)
