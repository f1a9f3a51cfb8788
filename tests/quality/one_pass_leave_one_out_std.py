"""Broken backend: the group and leave-one-out std in one pass, sqrt((Σx² - m·mean²) / (m - 1)), with no test for
equal rewards first (an arrangement of NeMo-RL's one-pass `calculate_baseline_and_std_per_prompt`,
nemo-rl-semantics §3.2).

Exact for 0/1 rewards and for any pair, so groups of two or three with leave-one-out hide it. Three equal rewards
that binary floating point cannot hold leave a residue of ~1e-8: under leave-one-out the group (1, 0.7, 0.7, 0.7)
gives rollout 0 the advantage 0.3 / (1.05e-8 + 1e-6) ≈ 2.97e5 instead of 0.3 (NeMo-RL's own matrix arrangement
leaves 1.58e-8 and 2.95e5; golden spec §9).
"""

from __future__ import annotations

import math
from unittest.mock import patch

import numpy as np

from compactsim.harness.pipeline import advantages as A
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "row.advantage"
SCENARIO = "leave-one-out-three-equal-inexact"


def grpo_baseline_and_std(rewards, *, leave_one_out):
    r = [float(x) for x in rewards]
    n = len(r)
    if n <= 1:
        return np.asarray(r, dtype=np.float64), np.zeros(n, dtype=np.float64)
    b, s = np.empty(n), np.empty(n)
    for i in range(n):
        others = np.asarray(r[:i] + r[i + 1:] if leave_one_out else r, dtype=np.float64)
        m = len(others)
        b[i] = mean = others.sum() / m
        s[i] = math.sqrt(max(((others * others).sum() - m * mean * mean) / (m - 1), 0.0)) if m > 1 else 0.0
    return b, s


class Backend(ReferenceBackend):
    name = "one-pass-leave-one-out-std"

    def materialize(self, plans, cfg):
        with patch.object(A, "grpo_baseline_and_std", grpo_baseline_and_std):
            return super().materialize(plans, cfg)
