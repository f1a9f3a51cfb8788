"""Broken backend: reports `sampling_importance_ratio` from sequence-level weights ``exp(Σ_t (prev − gen))``.

Training is the reference's (token-level weights, right update); only the logged ratio is the
mean over sequences of ``exp`` of each row's *summed* log-ratio — the peer bug that logged 0.0596
instead of 0.9999 (peer-bugs-and-techniques.md; NeMo-RL §4.6: a masked mean of the token-level
``w``, sequence-normalised only under GSPO, which the physical-trace path does not run).
"""

from __future__ import annotations

import torch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState
from tests.quality._patching import with_metrics

EXPECTED_CHECK = "train.metric"
EXPECTED_KEY = "sampling_importance_ratio"
SCENARIO = "importance-sampling-correction"


class Backend(ReferenceBackend):
    name = "sampling-importance-ratio-sequence-exp-sum"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        result = super().train_step(state, batch, cfg)
        sample = batch.row_sample_mask.to(torch.float64)  # (R,)
        mask = batch.row_token_mask[:, 1:].to(torch.float64) * sample[:, None]  # (R, S-1)
        log_ratio = result.prev_logprobs[:, 1:].to(torch.float64) - batch.row_generation_logprobs[:, 1:].to(torch.float64)
        seq_log_w = torch.where(mask != 0, log_ratio, torch.zeros_like(log_ratio)).sum(-1)  # (R,) Σ_t, not the mean
        seq_w = torch.nan_to_num(torch.exp(seq_log_w), nan=0.0, posinf=0.0, neginf=0.0)
        ratio = float((seq_w * sample).sum() / (sample.sum() + 1e-8))
        return with_metrics(result, {EXPECTED_KEY: ratio})
