"""Broken backend: rewards pass through NeMo-RL's `scale_rewards` with its *default* mapping even though
``reward_scaling.enabled`` is off — ``clamp(r, source_min=0, source_max=1)`` then the identity map onto
``[target_min=0, target_max=1]`` — so the scaling looks like a no-op.

It is a no-op for every reward in [0, 1]. A penalty below 0 (an invalid tool call scored −1, a cost term) or a
summed multi-component reward above 1 is clamped into [0, 1] before the GRPO baseline, which flattens exactly the
differences the group's advantages are made of. NeMo-RL applies `scale_rewards` only when
`grpo.reward_scaling.enabled` (nemo-rl-semantics §3.4 step 3; `RewardScalingConfig.enabled=False` by default,
§3.1); the trainer config here has no such option, so rewards must reach the baseline unchanged.
"""

from __future__ import annotations

from dataclasses import replace

from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "row.advantage"
SCENARIO = "rewards-beyond-unit-interval"


def _scaled(r, source_min=0.0, source_max=1.0, target_min=0.0, target_max=1.0):
    if r is None:
        return None
    r = min(max(float(r), source_min), source_max)
    return target_min + (r - source_min) * (target_max - target_min) / (source_max - source_min)


class Backend(ReferenceBackend):
    name = "rewards-clamped-to-unit-interval"

    def materialize(self, plans, cfg):
        plans = [replace(p, evidence=replace(p.evidence, reward=_scaled(p.evidence.reward))) for p in plans]
        return super().materialize(plans, cfg)
