"""Broken backend: each micro-batch's loss is also divided by the rank's micro-batch count before backward.

The habit of trainers that accumulate gradients as a mean (`loss / accumulation_steps`), kept after
porting to NeMo-RL's loss, which is already divided by the global token count (§4.6): the applied
gradient shrinks by the micro-batch count. The logged loss is the sum of the undivided terms, so it
is right. A float32 update cannot show the scale (Adam divides it out, and float32 noise hides the
epsilon term); the gradient read back from AdamW's first moment does.
"""

from __future__ import annotations

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState
from tests.quality._patching import loss_replaced

EXPECTED_CHECK = "train.gradient"
SCENARIO = "float32-training"


class Backend(ReferenceBackend):
    name = "gradient-accumulation-mean"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        steps = len(batch.microbatch_rows(0))

        def wrap(loss_fn):
            def divided(*args, **kwargs):
                out = loss_fn(*args, **kwargs)
                return out._replace(loss=out.loss / steps)
            return divided

        with loss_replaced(wrap):
            return super().train_step(state, batch, cfg)
