"""Broken backend: the `normalize_rewards: false` branch always subtracts the leave-one-out baseline, ignoring
`use_leave_one_out_baseline: false`.

With normalisation on the flag is honoured, so each setting alone (`no-leave-one-out-baseline`,
`unnormalized-advantages`) trains right; only both off together (`plain-baseline-unnormalized`: the group mean
0.375, not the others' mean) shows it.
"""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._patching import materialized_with_advantage_settings

EXPECTED_CHECK = "row.advantage"
SCENARIO = "plain-baseline-unnormalized"


class Backend(ReferenceBackend):
    name = "leave-one-out-forced-when-unnormalized"

    def materialize(self, plans, cfg):
        acfg = cfg.advantage_config()
        if acfg.normalize_rewards or acfg.use_leave_one_out_baseline:
            return super().materialize(plans, cfg)
        return materialized_with_advantage_settings(plans, cfg, use_leave_one_out_baseline=True)
