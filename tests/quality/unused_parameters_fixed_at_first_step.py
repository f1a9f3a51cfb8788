"""Broken backend: the parameters that took no gradient at the first step are treated as unused for the rest of the run.

A plain PyTorch loop (a parameter no row reached keeps ``.grad`` None and AdamW skips it, as `correct_plain_torch_loop`
does) wrapped the way DDP's ``static_graph=True`` / ``find_unused_parameters`` bookkeeping works: the set of unused
parameters is recorded on the first iteration and assumed never to change, so their gradients are never reduced
afterwards and the optimizer keeps skipping them. Every run whose batches all carry images (or all carry none) is
right; a run that starts text-only and gets screenshots later never trains the image patch projection although rows
reach it.
"""

from __future__ import annotations

from unittest.mock import patch

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._alt_trainer import Knobs, train_step

EXPECTED_CHECK = "counts.optimizer"
SCENARIO = "image-parameters-idle-two-steps"  # text-only steps 0-1, screenshots at step 2


class Backend(ReferenceBackend):
    name = "unused-parameters-fixed-at-first-step"

    def __init__(self) -> None:
        self.unused: dict[int, set[int]] = {}  # per optimizer: ids of the parameters without a first-step gradient

    def train_step(self, state, batch, cfg):
        optimizer = state.optimizer
        original = optimizer.step

        def step(closure=None):
            params = [p for group in optimizer.param_groups for p in group["params"]]
            if id(optimizer) not in self.unused:
                self.unused[id(optimizer)] = {id(p) for p in params if p.grad is None}
            for p in params:
                if id(p) in self.unused[id(optimizer)]:
                    p.grad = None  # never reduced: the static graph says nothing reaches it
            return original(closure)

        step._wrapped_by_lr_sched = True  # type: ignore[attr-defined]
        with patch.object(optimizer, "step", step):
            return train_step(state, batch, cfg, Knobs(allreduce="accumulate_sum", fill_missing_grads=False))
