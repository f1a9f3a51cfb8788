"""A CORRECT backend (false-positive hunt 5): importance weights in ratio space exp(prev)/exp(gen), tis upper-only as torch.minimum, each micro-batch's local masked mean weighted by its share n_mb/(N+1e-8) (HF num_items_in_batch style)."""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality.fp5_step import Opts, train_step

SCENARIO = "layout-dp2-kl-steps-clip-binds"


class Backend(ReferenceBackend):
    name = "fp5-ratio_space_is"

    def train_step(self, state, batch, cfg):
        return train_step(state, batch, cfg, Opts(is_space="ratio", mb_norm="share"))
