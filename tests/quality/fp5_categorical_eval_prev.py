"""A CORRECT backend (false-positive hunt 5): logprobs from torch.distributions.Categorical, prev/ref from a separate inference_mode pass in eval(), ranks reversed, the grad norm over one concatenated vector with a clamp(max=1) coefficient."""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality.fp5_step import Opts, train_step

SCENARIO = "layout-dp2-kl-steps-clip-binds"


class Backend(ReferenceBackend):
    name = "fp5-categorical_eval_prev"

    def train_step(self, state, batch, cfg):
        return train_step(state, batch, cfg, Opts(logprobs="categorical", prev="eval_pass", reverse_ranks=True, norm="flat"))
