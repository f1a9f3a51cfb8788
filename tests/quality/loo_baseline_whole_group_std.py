"""Broken backend: leave-one-out baseline, but the std is taken over the whole group, the rollout itself included.

NeMo-RL computes both from the same leave-one-out mask: "With leave-one-out, the std is also computed over the
others" (nemo-rl-semantics §9.3; §3.2 ``sq = M @ (r²·v) / m``, ``std = sqrt((sq − b²)·m/(m−1))``). A trainer
that writes ``baseline = (sum - r) / (n - 1)`` by hand and reuses ``rewards.std()`` for the scale divides by a
different std: for a group of two the leave-one-out std is 0 (the advantage stays r_i − r_j = ±1), the group's
is 0.707 (advantage ±1.414).
"""

from __future__ import annotations

from unittest.mock import patch

import numpy as np

from compactsim.harness.pipeline import advantages as A
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "row.advantage"
SCENARIO = "layout-dp2-microbatch2-mask-sample"  # rewards 1, 0, 1: leave-one-out std 0.707 vs the group's 0.577


_REFERENCE = A.grpo_baseline_and_std


def _mixed(rewards, *, leave_one_out):
    base, _ = _REFERENCE(rewards, leave_one_out=leave_one_out)
    r = np.asarray([float(x) for x in rewards])
    whole = float(np.std(r, ddof=1)) if len(r) > 1 else 0.0
    return base, np.full(len(r), whole)


class Backend(ReferenceBackend):
    name = "loo-baseline-whole-group-std"

    def materialize(self, plans, cfg):
        with patch.object(A, "grpo_baseline_and_std", _mixed):
            return super().materialize(plans, cfg)
