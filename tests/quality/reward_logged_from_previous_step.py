"""Misreporting backend: the driver's `reward` metric is the mean reward of the batch trained one step earlier.

A loop that logs from the batch it keeps for the next step (generation of step k+1 overlapping the training of step
k, as async loops arrange it) logs step k's reward at step k+1. Step 0 logs its own mean. Training is the
reference's. Every catalogue scenario gave each rollout slot the same reward at every step, so the lag never changed
the number; `reward-changes-between-steps` gives its group the mean 2/3 at step 0 and 1/3 at step 1.
"""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._patching import with_metrics

EXPECTED_CHECK = "train.metric"
EXPECTED_KEY = "reward"
SCENARIO = "reward-changes-between-steps"


class Backend(ReferenceBackend):
    name = "reward-logged-from-previous-step"

    def __init__(self) -> None:
        self.previous: float | None = None

    def train_step(self, state, batch, cfg):
        result = super().train_step(state, batch, cfg)
        rewards = [record.reward for record in batch.logical]
        now = sum(rewards) / len(rewards)
        logged = now if self.previous is None else self.previous
        self.previous = now
        return with_metrics(result, {"reward": logged})
