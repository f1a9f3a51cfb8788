"""A backend that is correct by upstream's standard: NeMo-RL's `ClippedPGLossFn` (as in fp3_dtensor_v2_metric_flow.py)
with the *Megatron* worker's per-micro-batch metric bookkeeping (false-positive hunt 3).

Upstream behaviour mirrored (NVIDIA-NeMo/RL at 7ea279abf), nemo_rl/models/policy/workers/megatron_policy_worker.py:
- 1004-1035: for every micro-batch the loss reduced, each metric is divided by `num_global_batches` except keys
  containing ``_min``/``_max``. The dict gains ``lr = scheduler.get_lr(param_groups[0])``,
  ``wd = scheduler.get_wd()``, `global_valid_seqs` and `global_valid_toks`. Every micro-batch is kept, and its loss
  with it: unlike the DTensor worker, there is *no* ``num_valid_samples > 0`` filter. A micro-batch with no trained
  token (padding rows, `mask_sample` rows) therefore reaches the driver with `probs_ratio_min = +inf` and
  `probs_ratio_max = -inf`. grpo.py:3469-3479 drops ±inf before taking the min/max, and logs −1.0 when nothing is
  left. `wd` is reduced by `np.mean` (3480-3489);
- megatron/train.py:832-868 `aggregate_training_statistics`: lists per key, global loss SUM-all-reduced.

The gradient path (mcore's loss scaling and DDP reduction) is not what this module tests. It keeps the DTensor
layout of fp3_dtensor_v2_metric_flow.py, which gives the same gradient (correct_megatron_divide_once.py covers
Megatron's normalisation), and so do the norm and clipping (float64; upstream's float32 norm is the finding of
fp3_dtensor_v1_grad_norm.py). Unlike the DTensor flow, an all-masked step still logs `lr` here, as Megatron does.
"""

from __future__ import annotations

from tests.quality.fp3_dtensor_v2_metric_flow import Backend as _DTensorV2Flow

SCENARIO = "loss-metrics-all-rows-masked"


class Backend(_DTensorV2Flow):
    name = "fp3-megatron-metric-flow"

    def worker_extras(self, state) -> dict:
        group = state.optimizer.param_groups[0]
        return {"lr": group["lr"], "wd": group["weight_decay"]}

    def keep(self, loss_metrics: dict) -> bool:
        return True  # megatron_policy_worker.py:1008-1022 keeps every micro-batch
