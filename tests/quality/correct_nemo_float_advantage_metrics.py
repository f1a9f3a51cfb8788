"""A CORRECT backend (training unchanged) that logs `advantages/sum|mean|min|max` exactly as NeMo-RL's driver
computes them (nemo-rl-semantics §3.7: `advantages.float().sum()` over the broadcast [B, S] tensor, the masked
mean over token_loss_mask == 1), i.e. in float32, whatever the trainer's dtype. A logging-precision probe: NeMo-RL's
own formula, to float32 resolution."""

from __future__ import annotations

from tests.quality.correct_own_step import Backend as _Own, Opts

SCENARIO = "layout-dp2-microbatch2-mask-sample"  # advantages/sum 114.7366 logs 114.7366 (float32 rounding 4.6e-5)


class Backend(_Own):
    name = "correct-nemo-float-advantage-metrics"
    opts = Opts(nemo_float_adv_metrics=True)
