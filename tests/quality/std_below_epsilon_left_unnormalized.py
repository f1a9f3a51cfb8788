"""Broken backend: a group counts as "no variation" when its std is at most 1e-6 (`std > eps`), not when it is 0.

nemo-rl-semantics §3.3 divides wherever std > 0. Rewards that differ by 1e-7 (a reward model's near-ties,
`near-tie-rewards`) then keep their raw differences (~1e-7) instead of (r - b) / (std + 1e-6) (~-0.047); exactly
equal, 0/1 and graded rewards are all right.
"""

from __future__ import annotations

from unittest.mock import patch

import numpy as np

from compactsim.harness.pipeline import advantages as A
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "row.advantage"
SCENARIO = "near-tie-rewards"


def grpo_advantages(rewards, *, leave_one_out=True, normalize=True, clip_low=None, clip_high=None):
    r = np.asarray([float(x) for x in rewards], dtype=np.float64)
    b, std = A.grpo_baseline_and_std(r, leave_one_out=leave_one_out)
    adv = r - b
    if len(r) <= 1:
        adv = np.zeros_like(r)
    if normalize:
        varied = std > A.STD_EPSILON  # the bug: a threshold instead of std > 0
        adv[varied] = adv[varied] / (std[varied] + A.STD_EPSILON)
    return A.clip_advantages(adv, clip_low, clip_high), b, std


class Backend(ReferenceBackend):
    name = "std-below-epsilon-left-unnormalized"

    def materialize(self, plans, cfg):
        with patch.object(A, "grpo_advantages", grpo_advantages):
            return super().materialize(plans, cfg)
