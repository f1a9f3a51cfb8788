"""Broken backend: each rollout's verify answer (reward, `mask_sample`) is cached by its slot and never invalidated.

A cache meant to collapse resubmitted results within one collection, keyed by (task id, group, rollout index) and
kept for the whole run: from step 1 on every rollout trains on the reward and flag its slot got at step 0 (group ids
are step-scoped, `s<k>-g<j>`, so the key drops the step). Every catalogue scenario gave a slot the same reward and
flag at every step; `reward-changes-between-steps` changes slot 0's reward at step 1.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import replace

from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "row.advantage"
SCENARIO = "reward-changes-between-steps"


def slot_key(evidence) -> Hashable:
    """(task id, group within its step, rollout index); a rollout without that identity is its own key."""
    if evidence.task_id is None or evidence.rollout_index is None or evidence.group_id is None:
        return evidence.rollout_id
    return evidence.task_id, evidence.group_id.partition("-")[2], evidence.rollout_index


class Backend(ReferenceBackend):
    name = "verify-answers-cached-by-slot"

    def __init__(self) -> None:
        self.answers: dict[Hashable, tuple[float, bool]] = {}

    def materialize(self, plans, cfg):
        cached = []
        for plan in plans:
            ev = plan.evidence
            reward, mask = self.answers.setdefault(slot_key(ev), (ev.reward, ev.mask_sample))
            cached.append(replace(plan, evidence=replace(ev, reward=reward, mask_sample=mask)))
        return super().materialize(cached, cfg)
