"""Broken backend: the `mask_sample` flag alone is cached by rollout slot for the whole run (rewards stay right).

The flag-only variant of `verify_answers_cached_by_slot`: a rollout the environment masks from step 1 on still trains,
and one it stops masking stays out of the loss. Every catalogue `mask_sample` list masked the same slots at every
step; `mask-sample-from-step-1` masks rollout 1 at step 1 only.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import replace

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality.verify_answers_cached_by_slot import slot_key

EXPECTED_CHECK = "row.sample_mask"
SCENARIO = "mask-sample-from-step-1"


class Backend(ReferenceBackend):
    name = "mask-sample-cached-by-slot"

    def __init__(self) -> None:
        self.flags: dict[Hashable, bool] = {}

    def materialize(self, plans, cfg):
        cached = [replace(p, evidence=replace(p.evidence, mask_sample=self.flags.setdefault(slot_key(p.evidence),
                                                                                         p.evidence.mask_sample)))
                  for p in plans]
        return super().materialize(cached, cfg)
