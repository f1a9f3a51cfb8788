"""Broken backend: router replay silently off — the batch's routed experts are dropped before training."""

from __future__ import annotations

from dataclasses import replace

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "row.routes_missing"
SCENARIO = "layout-dp2-microbatch2-mask-sample"  # router replay on: the recorded routes must reach every row


class Backend(ReferenceBackend):
    """Trains with the model's own router (replay switched off), still declaring the boundary sentinels."""

    name = "routes-dropped"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        no_replay = cfg.model_copy(update={"policy": cfg.policy.model_copy(update={"router_replay_enabled": False})})
        return super().train_step(state, replace(batch, routed_experts=None), no_replay)
