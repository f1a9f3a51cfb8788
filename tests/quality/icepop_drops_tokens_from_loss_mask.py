"""Broken backend: tokens whose importance weight ``icepop`` drops (w outside [min, max]) are taken out of the loss
mask, as verl's rollout-correction "mask" mode does by zeroing them in ``response_mask``, so they also leave the
token-mean normaliser and the KL term.

NeMo-RL's icepop only sets those tokens' importance weight to 0 (nemo-rl-semantics §4.4): they stay in the global
count of trained tokens ``N`` (§4.6) and keep their KL penalty. With the mask shrunk, every kept token's policy
gradient is scaled by ``N / (N − dropped)`` and the dropped tokens' KL gradient is lost — nothing at all when no
weight falls outside the bounds, so a run whose sampler and trainer agree never shows it. The dropped tokens come
from a no-grad pass under the weights before the step, as the trainer computes its ``prev`` logprobs; the batch the
trainer was handed (and its artifact) is untouched.
"""

from __future__ import annotations

from unittest.mock import patch

import torch

from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.gradient"
SCENARIO = "importance-sampling-icepop"


def _kept_mask(state, batch, cfg) -> torch.Tensor:
    """(R, S) token mask without the trained tokens whose icepop weight exp(prev − gen) falls outside the bounds."""
    lc = cfg.loss_fn
    images = T._row_images(batch, dtype=state.dtype, device=state.device)
    routes = batch.routed_experts if cfg.policy.router_replay_enabled else None
    microbatches = [(rank, rows) for rank in range(batch.dp_size) for rows in batch.microbatch_rows(rank)]
    prev = T._all_logprobs(state.policy, batch, microbatches, images, routes).to(torch.float64)  # (R, S)
    w = torch.nan_to_num(torch.exp(prev - batch.row_generation_logprobs.to(torch.float64)), nan=0.0, posinf=0.0,
                         neginf=0.0)
    out = (w < lc.truncated_importance_sampling_ratio_min) | (w > lc.truncated_importance_sampling_ratio)
    return batch.row_token_mask * (~out).to(batch.row_token_mask.dtype)


class Backend(ReferenceBackend):
    name = "icepop-drops-tokens-from-loss-mask"

    def train_step(self, state, batch, cfg):
        if cfg.loss_fn.truncated_importance_sampling_type != "icepop":
            return super().train_step(state, batch, cfg)
        kept = _kept_mask(state, batch, cfg)
        counts, sliced = T.valid_counts, T._slice

        def valid(token_mask, sample_mask):  # the step's global normaliser, from the shrunk mask
            return counts(kept if token_mask is batch.row_token_mask else token_mask, sample_mask)

        def slice_(batch_, rows, row_images, row_routes, device):
            mb = sliced(batch_, rows, row_images, row_routes, device)
            mask = kept[rows.start:rows.stop, : mb.width].to(device)
            return T._Microbatch(**{**{f: getattr(mb, f) for f in mb.__slots__}, "token_mask": mask})

        with patch.object(T, "valid_counts", valid), patch.object(T, "_slice", slice_):
            return super().train_step(state, batch, cfg)
