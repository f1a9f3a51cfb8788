"""A CORRECT backend: decoupled weight decay applied by hand, p <- p·(1 - lr·λ), right before an AdamW whose param
group holds weight_decay = 0 (as trainers do that keep decay out of the optimizer, e.g. to exclude parameters by
name, or that wrap an Adam kernel without decay). torch's AdamW does exactly this multiplication first, then the
Adam step, and only for parameters it updates (.grad not None), so the new weights are bit-identical. The group's
λ is moved into the backend before the first update; the patch is set on the optimizer instance."""

from __future__ import annotations

import functools

import torch

from compactsim.harness.pipeline.backend import ReferenceBackend

SCENARIO = "warmup-weight-decay-no-clip"


def _step_with_decay(opt, orig_step, decay, closure=None):
    with torch.no_grad():
        for group in opt.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.mul_(1 - float(group["lr"]) * decay)
    return orig_step(closure)


class Backend(ReferenceBackend):
    name = "correct-manual-decoupled-decay"

    def train_step(self, state, batch, cfg):
        opt = state.optimizer
        if not getattr(opt, "_manual_decay_patched", False):
            decay = opt.param_groups[0]["weight_decay"]
            for group in opt.param_groups:
                group["weight_decay"] = 0.0
            opt.step = functools.partial(_step_with_decay, opt, opt.step, decay)
            opt._manual_decay_patched = True
        return super().train_step(state, batch, cfg)
