"""Broken backend: LR warmup read from each parameter's own update count instead of the scheduler's.

A plain PyTorch loop (a parameter no row reached keeps ``.grad`` None and AdamW skips it, as `correct_plain_torch_loop`
does) whose warmup is applied inside the optimizer from ``state['step']``, the way Adafactor's relative step size and
several hand-rolled "warmup in the optimizer" implementations read it, not from the LambdaLR's increments. While every
parameter is updated at every step the two counts are one and the same; a parameter that sat out steps (the image
patch projection through text-only steps) restarts its warmup at its first update: under a 4-increment warmup it
joins at step 2 with 1/4 of the learning rate instead of 3/4. Only a run whose batches change from text-only to
multimodal during warmup shows it.
"""

from __future__ import annotations

from unittest.mock import patch

import torch

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._alt_trainer import Knobs, train_step

EXPECTED_CHECK = "train.update"
SCENARIO = "image-parameters-join-during-warmup"


def _own_step(optimizer: torch.optim.Optimizer, p: torch.Tensor) -> int:
    step = optimizer.state[p].get("step", 0) if p in optimizer.state else 0
    return int(step.item()) if isinstance(step, torch.Tensor) else int(step)


def _per_parameter_warmup(optimizer: torch.optim.Optimizer, factor):
    original = optimizer.step

    def step(closure=None):
        grads = {p: p.grad for group in optimizer.param_groups for p in group["params"]}
        lrs = [group["lr"] for group in optimizer.param_groups]
        counts = sorted({_own_step(optimizer, p) for p, g in grads.items() if g is not None})
        try:
            for n in counts:  # one update per distinct own count, each at that count's warmup factor
                for p, g in grads.items():
                    p.grad = g if g is not None and _own_step(optimizer, p) == n else None
                for group in optimizer.param_groups:
                    group["lr"] = group["initial_lr"] * factor(n)
                original(closure)
        finally:
            for p, g in grads.items():
                p.grad = g
            for group, lr in zip(optimizer.param_groups, lrs):
                group["lr"] = lr

    step._wrapped_by_lr_sched = True  # type: ignore[attr-defined]  # torch's scheduler checks the order on this flag
    return step


class Backend(ReferenceBackend):
    name = "warmup-from-parameter-step-count"

    def train_step(self, state, batch, cfg):
        factor = state.scheduler.lr_lambdas[0]
        with patch.object(state.optimizer, "step", _per_parameter_warmup(state.optimizer, factor)):
            return train_step(state, batch, cfg, Knobs(allreduce="accumulate_sum", fill_missing_grads=False))
