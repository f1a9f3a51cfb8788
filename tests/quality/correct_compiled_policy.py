"""A CORRECT backend: the policy wrapped by torch.compile (parameter names gain ``_orig_mod.``); it must pass.

`torch.compile(model)` returns an `OptimizedModule` holding the model as `_orig_mod`; its attributes
pass through, so the weights, the optimizer's parameters and every update are the model's own. The
``eager`` compile backend keeps the test free of a C compiler.
"""

from __future__ import annotations

import torch

from compactsim.harness.pipeline.backend import ReferenceBackend

SCENARIO = "warmup-weight-decay-no-clip"  # three steps with warmup and decay, a quarter the cost of scripted-three-steps


class Backend(ReferenceBackend):
    name = "correct-compiled-policy"

    def train_step(self, state, batch, cfg):
        if not isinstance(state.policy, torch._dynamo.eval_frame.OptimizedModule):
            state.policy = torch.compile(state.policy, backend="eager")
        return super().train_step(state, batch, cfg)
