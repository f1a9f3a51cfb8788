"""Broken backend: logs `kl_penalty` as β·KL, the loss term, instead of KL (NeMo-RL: kl.item() / β, §4.6).

The update is right; only the number a user watches to tune β is off by the factor β.
"""

from __future__ import annotations

from dataclasses import replace

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "train.metric"
SCENARIO = "no-clip-gradient-above-one"  # β 0.5: the k2 KL is non-zero from step 1


class Backend(ReferenceBackend):
    name = "kl-penalty-times-beta"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        result = super().train_step(state, batch, cfg)
        metrics = {**result.metrics, "kl_penalty": result.metrics["kl_penalty"] * cfg.loss_fn.reference_policy_kl_penalty}
        return replace(result, metrics=metrics, artifact=replace(result.artifact, metrics=metrics))
