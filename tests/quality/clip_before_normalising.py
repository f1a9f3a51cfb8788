"""Broken backend: GRPO advantages are clipped on the raw r − b, before the division by std + 1e-6.

NeMo-RL's estimator computes A = (r − b) / (std + 1e-6) and only then `_clip_grpo_advantages` clamps
to [advantage_clip_low, advantage_clip_high] (nemo-rl-semantics §3.4, step 12; golden-spec §9: "Then
clip"). With two rollouts per group the leave-one-out std is 0 and the order cannot show; a graded
group of three shows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from unittest.mock import patch

import numpy as np

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.core.trace_plan import TracePlan
from compactsim.harness.pipeline import advantages as advantages_module
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig

EXPECTED_CHECK = "row.advantage"
SCENARIO = "advantage-clip-graded-group"


def _clip_then_normalise(
    rewards: Sequence[float], *, leave_one_out: bool = True, normalize: bool = True,
    clip_low: float | None = None, clip_high: float | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r = np.asarray([float(x) for x in rewards], dtype=np.float64)
    b, std = advantages_module.grpo_baseline_and_std(r, leave_one_out=leave_one_out)
    adv = r - b if len(r) > 1 else np.zeros_like(r)
    if clip_low is not None or clip_high is not None:
        adv = np.clip(adv, clip_low, clip_high)  # the bug: before normalising
    if normalize:
        pos = std > 0
        adv[pos] = adv[pos] / (std[pos] + advantages_module.STD_EPSILON)
    return adv, b, std


class Backend(ReferenceBackend):
    """The reference materializer with a per-group estimator that clips first."""

    name = "clip-before-normalising"

    def materialize(self, plans: Sequence[TracePlan], cfg: TrainerConfig) -> TraceBatch:
        acfg = cfg.advantage_config()

        def estimate(rewards: Sequence[float], *, leave_one_out: bool = True, normalize: bool = True,
                     **_: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            return _clip_then_normalise(rewards, leave_one_out=leave_one_out, normalize=normalize,
                                        clip_low=acfg.advantage_clip_low, clip_high=acfg.advantage_clip_high)

        # the clip moves into the estimate, ahead of the division; the reference's clip after it is gone
        with patch.object(advantages_module, "grpo_advantages", estimate), \
                patch.object(advantages_module, "clip_advantages", lambda adv, low, high: adv):
            return super().materialize(plans, cfg)
