"""Broken backend (misreporting): the step's ``reward`` metric — NeMo-RL's driver logs the batch's mean reward
under that key (nemo-rl-semantics §3.7: "`lr`, `wd`, `reward`, ... use `np.mean`") — is computed over the
materialized *rows*: each physical row carries its parent's reward, padding rows carry 0 (the PR's padding rows:
"reward 0"), and the mean runs over all of them.

A rollout that compacted into k rows weighs k times, and dp/micro-batch padding rows pull the mean toward 0, so
the logged reward depends on compaction and batch geometry rather than on what the policy earned. It is the
same slip as the PR review's "total_num_tokens now includes synthetic padding rows" (fixed there); the mean
reward of a step is over its logical rollouts. Training is the reference's; only the metric is wrong.
"""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._patching import with_metrics

EXPECTED_CHECK = "train.metric"
SCENARIO = "fault-finish-length-midway"  # K=1 recency: rollouts of 2 rows (cut at turn 3) and 4 rows
EXPECTED_KEY = "reward"


class Backend(ReferenceBackend):
    name = "reward-mean-over-physical-rows"

    def train_step(self, state, batch, cfg):
        result = super().train_step(state, batch, cfg)
        per_row = [batch.logical[int(p)].reward if int(p) >= 0 else 0.0 for p in batch.parent_indices]
        return with_metrics(result, {"reward": sum(per_row) / len(per_row)})
