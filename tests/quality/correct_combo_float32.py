"""A CORRECT backend for float32 runs combining two precision-raising rewrites: logprobs and the loss in float64 on
upcast logits, and micro-batch gradients (torch.autograd.grad) accumulated and all-reduced in float64 buffers, cast
back to float32 into .grad."""

from __future__ import annotations

from tests.quality.correct_own_step import Backend as _Own, Opts

SCENARIO = "float32-training"


class Backend(_Own):
    name = "correct-combo-float32"
    opts = Opts(logprobs="f64", grad="autograd_grad", accumulate_f64=True)
