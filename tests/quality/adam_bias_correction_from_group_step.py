"""Broken backend: a plain PyTorch loop (a parameter no row reached keeps ``.grad`` None and the optimizer skips it, as
`correct_plain_torch_loop` does) under an AdamW whose bias correction counts steps per *param group* — every ``step()``
call — instead of per parameter, as DeepSpeed's and apex's FusedAdam keep ``group['step']``.

torch's AdamW corrects each parameter's moments by its own update count (README: a skipped parameter's "next update's
bias correction uses its own count, as torch's does"). With the group's count n, a parameter that sat out steps (the
image patch projection through text-only steps) takes its first update ``(1 − β₁)/(1 − β₁ⁿ)·√((1 − β₂ⁿ)/(1 − β₂))``
times torch's: 0.64x after two skipped steps, 0.49x after nine, 2.5x after 999. The per-parameter ``step`` counters are
kept as torch keeps them, so they read right. A parameter stepped at every step — every parameter of a run whose batches
all carry images, or all none — is updated exactly as torch updates it, so only a run whose batches change from
text-only to multimodal between steps can show it (the seventh red team found no such scenario; a rollout override's
`steps` now makes one).
"""

from __future__ import annotations

from unittest.mock import patch

import torch

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._alt_trainer import Knobs, train_step

EXPECTED_CHECK = "train.update"
SCENARIO = "image-parameters-idle-two-steps"  # text-only steps 0-1, screenshots at step 2 (an override's `steps`)


def _group_counted(optimizer: torch.optim.Optimizer, group_steps: dict[int, int]):
    original = optimizer.step

    def step(closure=None):
        own: dict[torch.Tensor, torch.Tensor] = {}
        for k, group in enumerate(optimizer.param_groups):
            n = group_steps.get(k, 0) + 1  # this call's step, counted once per group
            group_steps[k] = n
            for p in group["params"]:
                if p.grad is None:
                    continue  # skipped, as torch skips it
                state = optimizer.state[p]
                if not state:  # first update: torch would start this parameter's count at 0
                    zeros = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state.update(step=torch.tensor(0.0), exp_avg=zeros, exp_avg_sq=zeros.clone())
                own[p] = state["step"].clone()
                state["step"].fill_(n - 1)  # torch adds 1 before its bias correction: the group's n
        try:
            return original(closure)
        finally:
            for p, count in own.items():
                optimizer.state[p]["step"].copy_(count + 1)  # the per-parameter counter, as torch keeps it

    step._wrapped_by_lr_sched = True  # type: ignore[attr-defined]  # torch's scheduler checks the order on this flag
    return step


class Backend(ReferenceBackend):
    name = "adam-bias-correction-from-group-step"

    def __init__(self) -> None:
        self._group_steps: dict[int, dict[int, int]] = {}

    def train_step(self, state, batch, cfg):
        steps = self._group_steps.setdefault(id(state.optimizer), {})
        with patch.object(state.optimizer, "step", _group_counted(state.optimizer, steps)):
            return train_step(state, batch, cfg, Knobs(allreduce="accumulate_sum", fill_missing_grads=False))
