"""Misreporting backend: `is_oob_ratio` is the out-of-bounds share over token_mask positions, the tokens of
`mask_sample` rows included, where NeMo-RL's mask already holds sample_mask (nemo-rl-semantics §4.4).

The loss and the gradient are right; only the metric is wrong, and only when a truncated run has a masked rollout
(`truncated-importance-sampling-mask-sample`).
"""

from __future__ import annotations

import torch

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._patching import with_metrics

EXPECTED_CHECK = "train.metric"
EXPECTED_KEY = "is_oob_ratio"
SCENARIO = "truncated-importance-sampling-mask-sample"


class Backend(ReferenceBackend):
    name = "is-oob-ratio-counts-masked-rows"

    def train_step(self, state, batch, cfg):
        loss_fn = cfg.loss_fn
        if loss_fn.truncated_importance_sampling_type not in ("tis", "icepop"):
            return super().train_step(state, batch, cfg)
        generation = batch.row_generation_logprobs.clone()
        result = super().train_step(state, batch, cfg)
        prev = result.prev_logprobs.to(torch.float64)[:, 1:]
        gen = generation.to(torch.float64)[:, 1:]
        tokens = batch.row_token_mask.to(torch.float64)[:, 1:]  # the bug: sample_mask left out
        w = torch.nan_to_num(torch.exp(prev - gen), nan=0.0, posinf=0.0, neginf=0.0)
        low = loss_fn.truncated_importance_sampling_ratio_min or 0.0
        out = ((w > loss_fn.truncated_importance_sampling_ratio) | (w < low)).to(torch.float64)
        return with_metrics(result, {EXPECTED_KEY: float((out * tokens).sum() / (tokens.sum() + 1e-8))})
