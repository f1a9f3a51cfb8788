"""A CORRECT backend: AdamW with foreach=True (the multi-tensor implementation, torch's default where it can).

Same update as the reference's foreach=False, summed in another order; the audit must pass it.
"""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend

SCENARIO = "warmup-weight-decay-no-clip"


class Backend(ReferenceBackend):
    name = "correct-foreach-adamw"

    def train_step(self, state, batch, cfg):
        for group in state.optimizer.param_groups:
            group["foreach"] = True
        return super().train_step(state, batch, cfg)
