"""A backend that is correct by upstream's standard: `grad_norm` is logged as NeMo-RL's policy workers hand it to
the driver, as a float32 tensor (false-positive hunt 3).

Upstream behaviour mirrored (NVIDIA-NeMo/RL at 7ea279abf, the commit nemo-rl-semantics.md cites):

- nemo_rl/models/policy/workers/dtensor_policy_worker_v2.py:541-559 (the default DTensor worker):
  ``grad_norm = scale_grads_and_clip_grad_norm(...)`` then
  ``grad_norm = torch.tensor(grad_norm, device="cpu", dtype=torch.float32)``;
- nemo_rl/models/policy/workers/dtensor_policy_worker.py:968-980 and megatron_policy_worker.py:1070: the norm as
  ``torch.tensor([grad_norm])``. That is torch's default dtype, float32;
- nemo_rl/models/policy/lm_policy.py:823-826 passes ``results[0]["grad_norm"]`` through unchanged;
  nemo_rl/algorithms/grpo.py:3434 logs ``train_results["grad_norm"].numpy()``, and 3490-3491 reduces it with
  ``np.sum(v).item()``: a Python float that holds the float32 value.

So every NeMo-RL worker logs the pre-clip norm rounded to float32, whatever precision the weights train in: up to
2^-24 (6e-8) relative to the exact norm. The training step here, including the norm used for clipping, is the
reference's float64 step. Only the logged number is NeMo-RL's float32 rounding of it.

The semantics reference says nothing about the norm's logging precision, so upstream decides: the audit accepts a
norm within `checks.FLOAT32_LOGGING_RTOL` of the oracle's (`training_checks._upstream_grad_norm`). Before this hunt
it held float64 runs to rtol 1e-9 and refused this backend on every training scenario.
"""

from __future__ import annotations

import numpy as np
import torch

from compactsim.harness.core import metrics as M
from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._patching import with_metrics

SCENARIO = "no-compaction"


def driver_logged(grad_norm: float) -> float:
    """The worker's float32 tensor (dtensor_policy_worker_v2.py:557-559), then the driver's ``np.sum(v).item()``."""
    worker_value = torch.tensor(grad_norm, device="cpu", dtype=torch.float32)
    return np.sum(worker_value.numpy()).item()


class Backend(ReferenceBackend):
    name = "fp3-grad-norm-logged-float32"

    def train_step(self, state, batch, cfg):
        result = super().train_step(state, batch, cfg)
        return with_metrics(result, {M.GRAD_NORM: driver_logged(float(result.metrics[M.GRAD_NORM]))})
