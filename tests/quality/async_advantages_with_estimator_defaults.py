"""Broken backend: the async GRPO loop builds its advantage estimator with the estimator's defaults
(`normalize_rewards=True`, `use_leave_one_out_baseline=True`) instead of the run's `grpo.*` settings.

NeMo-RL's estimator reads its own `normalize_rewards` / `use_leave_one_out_baseline`, which the example YAML
interpolates from `grpo.*` (nemo-rl-semantics §3.1); the async loop constructs it separately (§6.4), and a port that
builds it from a config block missing those keys gets the defaults. Sync runs honour the settings; async runs
silently train leave-one-out, std-normalised advantages. No catalogue async scenario turned either setting off.
"""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._patching import materialized_with_advantage_settings

EXPECTED_CHECK = "row.advantage"
SCENARIO = "async-plain-baseline-unnormalized"


class Backend(ReferenceBackend):
    name = "async-advantages-with-estimator-defaults"

    def materialize(self, plans, cfg):
        acfg = cfg.advantage_config()
        if not cfg.grpo.async_grpo.enabled or (acfg.normalize_rewards and acfg.use_leave_one_out_baseline):
            return super().materialize(plans, cfg)
        return materialized_with_advantage_settings(plans, cfg, normalize_rewards=True, use_leave_one_out_baseline=True)
