"""An UNAUDITABLE backend (trains right): the optimizer steps MASTER COPIES of the weights, not the model's own
tensors, and the model's weights are copied from the masters after every update (Megatron's main params, DeepSpeed
ZeRO-Offload's CPU copies, FSDP CPU offload). Masters are float64; the AdamW over them is the one `state` holds,
with the schedule rebuilt over it before the first update; gradients are copied into the masters' .grad (after the
reference's clipping) inside an instance-level step patch. Same update, same weights.

The audit reads each update (the applied gradient, the learning rate, the step counters) from the optimizer's
state of the policy's own parameter objects, which this optimizer never holds: the README asks a backend to step
an optimizer over `state.policy.parameters()`. The finding must say so (`counts.optimizer`: none of the policy's
parameters is in the optimizer), never that the update skipped parameters."""

from __future__ import annotations

import functools

import torch

from compactsim.harness.pipeline.backend import ReferenceBackend

SCENARIO = "warmup-weight-decay-no-clip"


def _master_step(opt, orig_step, pairs, closure=None):
    with torch.no_grad():
        for model_p, master in pairs:
            master.grad = None if model_p.grad is None else model_p.grad.detach().to(master.dtype).clone()
            model_p.grad = None  # the model's gradient buffers are the trainer's to clear (zero_grad now clears the masters')
    out = orig_step(closure)
    with torch.no_grad():
        for model_p, master in pairs:
            model_p.copy_(master.to(model_p.dtype))
    return out


class Backend(ReferenceBackend):
    name = "master-weights-optimizer"

    def train_step(self, state, batch, cfg):
        old = state.optimizer
        if not getattr(old, "_masters", False) and not old.state:
            g = old.param_groups[0]
            params = list(state.policy.parameters())
            masters = [torch.nn.Parameter(p.detach().to(torch.float64).clone()) for p in params]
            opt = torch.optim.AdamW(masters, lr=g["initial_lr"], betas=g["betas"], eps=g["eps"],
                                    weight_decay=g["weight_decay"], foreach=False)
            opt._masters = True
            state.scheduler = torch.optim.lr_scheduler.LambdaLR(opt, state.scheduler.lr_lambdas[0])
            opt.step = functools.partial(_master_step, opt, opt.step, list(zip(params, masters)))
            state.optimizer = opt
        return super().train_step(state, batch, cfg)
