"""Broken backend: `is_oob_ratio` divided by every position of the micro-batch instead of the global token count.

``oob.float().mean()`` over the ``[B, S-1]`` tensor counts prompt and padding positions in the
denominator, and the micro-batch sum of such local means is no global fraction. NeMo-RL divides
the out-of-bounds trained tokens by the global ``N_tok`` (tis/icepop; sequences by ``N_seq`` for
seq-mask-tis), §4.4/§4.6. Training is the reference's.
"""

from __future__ import annotations

import torch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState
from tests.quality._patching import loss_replaced, next_token_frame

EXPECTED_CHECK = "train.metric"
EXPECTED_KEY = "is_oob_ratio"
SCENARIO = "importance-sampling-tis-bounds"


class Backend(ReferenceBackend):
    name = "is-oob-ratio-over-all-positions"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        def wrap(original):
            def loss(cfg_, **kw):
                out = original(cfg_, **kw)
                _, prev, mask = next_token_frame(kw)
                gen = kw["generation_logprobs"][:, 1:].to(torch.float64)
                w = torch.nan_to_num(torch.exp(torch.where(mask != 0, prev - gen, torch.zeros_like(prev))),
                                     nan=0.0, posinf=0.0, neginf=0.0)
                lo = cfg_.truncated_importance_sampling_ratio_min or 0.0
                oob = ((w < lo) | (w > cfg_.truncated_importance_sampling_ratio)) & (mask != 0)
                out.metrics[EXPECTED_KEY] = oob.to(torch.float64).mean().item()  # ÷ B·(S-1), not ÷ N_tok
                return out
            return loss

        with loss_replaced(wrap):
            return super().train_step(state, batch, cfg)
