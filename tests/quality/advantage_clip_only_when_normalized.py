"""Broken backend: `advantage_clip_low/high` applied inside the normalisation branch, so with `normalize_rewards`
off the advantages are never clipped.

nemo-rl-semantics §3: the clip bounds the advantage whatever normalisation did. Every catalogue clip scenario
normalised, where this trainer is right; `advantage-clip-unnormalized` (raw leave-one-out differences 1.0, -0.5,
-0.5 under a [-0.3, 0.3] clip) is not.
"""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._patching import materialized_with_advantage_settings

EXPECTED_CHECK = "row.advantage"
SCENARIO = "advantage-clip-unnormalized"


class Backend(ReferenceBackend):
    name = "advantage-clip-only-when-normalized"

    def materialize(self, plans, cfg):
        acfg = cfg.advantage_config()
        if acfg.normalize_rewards or (acfg.advantage_clip_low is None and acfg.advantage_clip_high is None):
            return super().materialize(plans, cfg)
        return materialized_with_advantage_settings(plans, cfg, advantage_clip_low=None, advantage_clip_high=None)
