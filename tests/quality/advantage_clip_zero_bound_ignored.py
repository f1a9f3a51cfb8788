"""Broken backend: an advantage clip bound of exactly 0.0 is treated as "not set" (``low = cfg.advantage_clip_low or
-inf``, ``high = cfg.advantage_clip_high or +inf``), the Python falsy-zero slip.

``advantage_clip_low: 0.0`` is how a run trains on non-negative advantages only (negative samples pushed no
further); this trainer silently keeps the negative advantages. Any non-zero bound (±0.5, the catalogue's) is
applied exactly. NeMo-RL's `_clip_grpo_advantages` clamps with the configured bounds whenever they are not None
(nemo-rl-semantics §3.4 step 12; `torch.clamp(adv, low, high)`, golden-spec §9).
"""

from __future__ import annotations

from unittest.mock import patch

import numpy as np

from compactsim.harness.pipeline import advantages as A
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "row.advantage"
SCENARIO = "advantage-clip-low-zero"


def _clip(adv, low, high):
    low = low or -np.inf
    high = high or np.inf
    return np.clip(adv, low, high)


class Backend(ReferenceBackend):
    name = "advantage-clip-zero-bound-ignored"

    def materialize(self, plans, cfg):
        with patch.object(A, "clip_advantages", _clip):
            return super().materialize(plans, cfg)
