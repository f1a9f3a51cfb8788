"""A CORRECT backend (false-positive hunt 5): -cross_entropy in chunks of 5 positions, k3 as r - 1 - log r, per-token advantages rebuilt from one value per row times the token mask."""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality.fp5_step import Opts, train_step

SCENARIO = "layout-dp2-kl-steps-clip-binds"


class Backend(ReferenceBackend):
    name = "fp5-ce_chunks_kl_ratio"

    def train_step(self, state, batch, cfg):
        return train_step(state, batch, cfg, Opts(logprobs="ce_chunks", kl_ratio_form=True, adv_from_row_value=True))
