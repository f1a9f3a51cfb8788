"""Broken backend: rewards are clamped to [-10, 10] before the GRPO baseline, OpenRLHF's default
``--reward_clip_range (-10, 10)`` carried into a NeMo-RL-style trainer.

The clamp is a no-op for every reward of magnitude 10 or less, which is every reward the catalogue gave (at most
1.5). An environment scoring on a wider scale (a game score, a success bonus of 20, a summed multi-component reward)
has its largest rewards flattened before the group's baseline and std, which changes every advantage of the group.
NeMo-RL hands rewards to the advantage estimator unchanged unless `reward_scaling` is enabled
(nemo-rl-semantics §3.4 step 3); the trainer config here has no such option.
"""

from __future__ import annotations

from dataclasses import replace

from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "row.advantage"
SCENARIO = "rewards-beyond-ten"

REWARD_CLIP_RANGE = (-10.0, 10.0)


def _clipped(r):
    if r is None:
        return None
    lo, hi = REWARD_CLIP_RANGE
    return min(max(float(r), lo), hi)


class Backend(ReferenceBackend):
    name = "rewards-clipped-to-ten"

    def materialize(self, plans, cfg):
        plans = [replace(p, evidence=replace(p.evidence, reward=_clipped(p.evidence.reward))) for p in plans]
        return super().materialize(plans, cfg)
