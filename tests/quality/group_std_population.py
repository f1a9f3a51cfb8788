"""Broken backend: the GRPO group std is the population std (``np.std`` with its default ``ddof=0``) instead of the
unbiased one NeMo-RL computes: ``std = sqrt((sq − b²)·m/(m−1))`` over the m rewards the baseline uses
(nemo-rl-semantics §3.2; the test fixture ``[1,2,3] → std=[0.7071, 1.4142, 0.7071]``). Under leave-one-out with a
group of three, each std is over two rewards, so ddof=0 makes it 1/√2 of NeMo's and every normalised advantage
√2 times too large. With groups of two (leave-one-out std 0, no division) nothing changes.
"""

from __future__ import annotations

from unittest.mock import patch

import numpy as np

from compactsim.harness.pipeline import advantages as A
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "row.advantage"
SCENARIO = "float32-graded-group"  # one group of three graded rewards (1, 0.5, 0)


def _population(rewards, *, leave_one_out):
    r = [float(x) for x in rewards]
    n = len(r)
    if n <= 1:
        return np.asarray(r, dtype=np.float64), np.zeros(n)
    base, std = np.empty(n), np.empty(n)
    for i in range(n):
        others = r[:i] + r[i + 1:] if leave_one_out else r
        base[i] = float(np.mean(others))
        std[i] = float(np.std(others))  # ddof=0
    return base, std


class Backend(ReferenceBackend):
    name = "group-std-population"

    def materialize(self, plans, cfg):
        with patch.object(A, "grpo_baseline_and_std", _population):
            return super().materialize(plans, cfg)
