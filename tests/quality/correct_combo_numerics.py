"""A CORRECT backend combining several legitimate rewrites of the step at once (one whole-catalogue run covers them
together): rows sorted by length and bucketed (padding rows dropped, one rank), each micro-batch backpropagating its
un-normalised token sum with per-parameter hooks dividing by the global count, logprobs as logit - logsumexp, KL in
the expm1 form with the weight 1 + lp - sg(lp), and clipping by get_total_norm(error_if_nonfinite=True) +
clip_grads_with_norm_."""

from __future__ import annotations

from tests.quality.correct_own_step import Backend as _Own, Opts

SCENARIO = "kl-mask-sample-steps"  # k2 KL non-zero at step 1, grad norm 1.67/1.86 so the clip binds at both steps


class Backend(_Own):
    name = "correct-combo-numerics"
    opts = Opts(layout="sorted", grad="hooks_sum", logprobs="logsumexp", kl="expm1", clip="split")
