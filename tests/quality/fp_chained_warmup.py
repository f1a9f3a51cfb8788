"""A CORRECT backend: the warmup as a chainable `MultiplicativeLR` put in `state` (false-positive hunt 4).

A trainer may step its own scheduler object. Here the linear warmup is written in its chained form,
`lr_e = lr_{e−1}·(e+1)/e` while `e < warmup` and 1 after, instead of `LambdaLR`'s closed form `lr·min(1, (e+1)/warmup)`:
the same rates up to rounding built over the steps. It is installed over the state's optimizer at the current epoch
(the LambdaLR already set that epoch's rate, so the chain continues from it). The audit reads the rate from the param
groups and the update, never from the scheduler's class.
"""

from __future__ import annotations

import torch

from compactsim.harness.pipeline.backend import ReferenceBackend

SCENARIO = "warmup-past-its-end"  # warmup 2 over four steps: the chain, then a factor of 1


class _Factor:
    def __init__(self, warmup: int) -> None:
        self.warmup = warmup

    def __call__(self, epoch: int) -> float:
        """The multiplier from epoch − 1 to `epoch`."""
        return 1.0 if self.warmup == 0 or epoch >= self.warmup else (epoch + 1) / epoch


class Backend(ReferenceBackend):
    name = "fp-chained-warmup"

    def train_step(self, state, batch, cfg):
        if not isinstance(state.scheduler, torch.optim.lr_scheduler.MultiplicativeLR):
            epoch = int(state.scheduler.last_epoch)
            chained = torch.optim.lr_scheduler.MultiplicativeLR(state.optimizer, _Factor(cfg.policy.lr_warmup_steps))
            chained.last_epoch = epoch  # constructing it stepped to epoch 0 without changing the rate
            state.scheduler = chained
        return super().train_step(state, batch, cfg)
