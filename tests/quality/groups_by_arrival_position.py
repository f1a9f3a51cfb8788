"""Broken backend: GRPO groups are formed by position — ``rewards.view(-1, num_generations_per_prompt)`` over the
rollouts in the order they arrived — instead of by group id (TRL/verl style, which assumes the G generations of a
prompt sit next to each other).

That holds when the rollout collector returns each group's generations contiguously and group after group, which
is how every catalogue batch arrives. A collector that streams rollouts in completion order (NeMo-Gym's
`run_rollouts` yields rows as they finish; async buffers mix groups) interleaves groups, and then baselines and
stds mix rewards of different prompts. NeMo-RL groups by first-prompt tokens / `_ng_task_index`
(nemo-rl-semantics §1.10, §3.2: "Groups are formed by first-turn prompt token equality"), the PR by the contract's
group id — by identity, never by position — and its stream accumulator regroups rows by `_rowidx` (§1.1).
"""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._patching import materialized_with_groups_by

EXPECTED_CHECK = "row.advantage"
SCENARIO = "groups-arrive-interleaved"


class Backend(ReferenceBackend):
    name = "groups-by-arrival-position"

    def materialize(self, plans, cfg):
        g = cfg.grpo.num_generations_per_prompt
        slot = {p.evidence.rollout_id: f"slot-{i // g}" for i, p in enumerate(plans)}
        return materialized_with_groups_by(plans, cfg, lambda e: slot[e.rollout_id])
