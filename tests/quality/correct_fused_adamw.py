"""A CORRECT backend: AdamW with fused=True (torch's fused kernel, on CPU since torch 2.4); the audit must pass it."""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend

SCENARIO = "warmup-weight-decay-no-clip"


class Backend(ReferenceBackend):
    name = "correct-fused-adamw"

    def train_step(self, state, batch, cfg):
        for group in state.optimizer.param_groups:
            group["foreach"] = False
            group["fused"] = True
        return super().train_step(state, batch, cfg)
