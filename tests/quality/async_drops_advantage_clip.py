"""Broken backend: the async GRPO loop never clips advantages.

NeMo-RL's async loop (`async_grpo_train`) re-implements the sync pipeline step by step (nemo-rl-semantics §6.4:
"... advantages, penalties, clip, train"); a port that copies the sync loop's advantage computation but not its
`_clip_grpo_advantages` call trains every async step on unclipped advantages, while every sync step clips. Every
catalogue scenario with `advantage_clip_low/high` ran sync, one step; no async scenario set a clip.
"""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._patching import materialized_with_advantage_settings

EXPECTED_CHECK = "row.advantage"
SCENARIO = "async-advantage-clip"


class Backend(ReferenceBackend):
    name = "async-drops-advantage-clip"

    def materialize(self, plans, cfg):
        acfg = cfg.advantage_config()
        if not cfg.grpo.async_grpo.enabled or (acfg.advantage_clip_low is None and acfg.advantage_clip_high is None):
            return super().materialize(plans, cfg)
        return materialized_with_advantage_settings(plans, cfg, advantage_clip_low=None, advantage_clip_high=None)
