"""A backend that is correct by upstream's standard: it reports NeMo-RL's driver metric `reward`, the mean of the
step's rewards held in NeMo-RL's float32 reward tensor (false-positive hunt 3).

Upstream behaviour mirrored (NVIDIA-NeMo/RL at 7ea279abf):

- nemo_rl/experience/rollouts.py:2784 (the NeMo-Gym group postprocessing) stores
  ``"total_reward": torch.tensor([r["full_result"]["reward"] for r in results])``. That is torch's default dtype,
  float32, and rollouts.py:872 allocates the native path's ``total_rewards`` as float32 explicitly;
- nemo_rl/algorithms/grpo.py:3038 ``rewards = repeated_batch["total_reward"]``; 3435 logs
  ``"reward": rewards.numpy()`` (async path: 5076); 3480-3489 reduce it with ``np.mean(v).item()``. numpy's mean of a
  float32 array is float32, so the logged value is the float32 mean of float32 rewards.

The audit wants `reward` to be the mean over the step's logical rollouts, masked ones included
(harness/audit/checks.py `check_reported_reward`). This backend takes that mean over the rollouts, each rollout's
reward once (`TraceBatch.logical`). Rows do not enter it, so a rollout split into several rows still counts once.
Training is the reference's step, unchanged.

A mean such as 2/3 logged from float32 is off by about 2e-8 relative. `check_reported_reward` compared with the
float64 ``fsum / n`` at 1e-9 and refused it; it now allows `checks.FLOAT32_LOGGING_RTOL` of the largest |reward|,
as `checks.float32_logging_bound` does for `advantages/*`.
"""

from __future__ import annotations

import numpy as np
import torch

from compactsim.harness.core import metrics as M
from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._patching import with_metrics

SCENARIO = "layout-dp2-microbatch2-mask-sample"  # rewards 1, 0, 1, one masked: mean 2/3, not float32-exact


def driver_reward(rewards: list[float]) -> float:
    """rollouts.py:2784's float32 tensor, then grpo.py:3489's ``np.mean(v).item()``."""
    total_reward = torch.tensor(rewards)  # float32, as NeMo-RL builds it
    return np.mean(total_reward.numpy()).item()


class Backend(ReferenceBackend):
    name = "fp3-reward-float32-mean"

    def train_step(self, state, batch, cfg):
        result = super().train_step(state, batch, cfg)
        return with_metrics(result, {M.REWARD: driver_reward([float(r.reward) for r in batch.logical])})
