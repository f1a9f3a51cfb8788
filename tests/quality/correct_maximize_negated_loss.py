"""A CORRECT backend: AdamW(maximize=True) stepped on the NEGATED loss (an objective-maximising trainer's way).

torch's AdamW with maximize negates the gradient before it enters the moments (`grad = -grad`), and the
backward of -loss gives .grad = -g: the moments, the bias correction and the update are bit for bit those of
AdamW(maximize=False) on +loss. The reported loss is the (positive) ClippedPG loss. The audit's README lists
"neither amsgrad nor maximize set" as a check, so this probes whether it judges the setting or the update.
"""

from __future__ import annotations

from tests.quality.correct_own_step import Backend as _Own, Opts

SCENARIO = "layout-dp2-kl-steps-clip-binds"


class Backend(_Own):
    name = "correct-maximize-negated-loss"
    opts = Opts(maximize=True)

    def train_step(self, state, batch, cfg):
        for group in state.optimizer.param_groups:
            group["maximize"] = True
        return super().train_step(state, batch, cfg)
