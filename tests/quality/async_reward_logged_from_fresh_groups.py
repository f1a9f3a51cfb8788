"""Misreporting backend: under async GRPO the driver's `reward` metric is the mean reward of the groups generated
by the newest policy version in the batch, not of every logical rollout the step trained.

NeMo-RL's async buffer stores each prompt group with the `rollout_metrics` its collector computed
(nemo-rl-semantics §6.2); a loop that logs the metrics of the groups collected for this step (the freshest ones)
instead of reducing over the trained batch drops the stale groups from `reward` whenever a batch mixes ages.
Training is the reference's. Every catalogue async scenario gave every group the same rewards, so the mean over any
subset of groups was the batch's mean.
"""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._patching import with_metrics

EXPECTED_CHECK = "train.metric"
EXPECTED_KEY = "reward"
SCENARIO = "async-mixed-age-groups-different-rewards"


class Backend(ReferenceBackend):
    name = "async-reward-logged-from-fresh-groups"

    def train_step(self, state, batch, cfg):
        result = super().train_step(state, batch, cfg)
        if not cfg.grpo.async_grpo.enabled:
            return result
        versions = [r.generation_policy_version for r in batch.logical if r.generation_policy_version is not None]
        if not versions:
            return result
        newest = max(versions)
        rewards = [r.reward for r in batch.logical if r.generation_policy_version == newest]
        return with_metrics(result, {"reward": sum(rewards) / len(rewards)})
