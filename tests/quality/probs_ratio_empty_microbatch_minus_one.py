"""Broken backend: a micro-batch without trained tokens reports −1.0 for `probs_ratio[_clamped]_min/max`.

NeMo-RL's micro-batch value for an empty extremum is +inf (min) / −inf (max), the identity of the
min/max that combines micro-batches (§4.6); −1.0 is only how its driver *prints* a step with no
valid value at all (§3.7). Used per micro-batch, −1.0 wins the min of every step that has a
masked-out micro-batch. Training is the reference's.
"""

from __future__ import annotations

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState
from tests.quality._patching import local_counts, loss_replaced

EXPECTED_CHECK = "train.metric"
EXPECTED_KEY = "probs_ratio_min"
#: One rollout is mask_sample'd: with one-row micro-batches its rows are micro-batches without trained tokens.
SCENARIO = "kl-mask-sample-steps"  # the mask_sample'd row is a one-row micro-batch


class Backend(ReferenceBackend):
    name = "probs-ratio-empty-microbatch-minus-one"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        def wrap(original):
            def loss(cfg_, **kw):
                out = original(cfg_, **kw)
                tokens, _ = local_counts(kw)
                if tokens == 0:
                    for key in ("probs_ratio_min", "probs_ratio_max", "probs_ratio_clamped_min", "probs_ratio_clamped_max"):
                        out.metrics[key] = -1.0
                return out
            return loss

        with loss_replaced(wrap):
            return super().train_step(state, batch, cfg)
