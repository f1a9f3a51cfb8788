"""Broken backend: importance weights computed verl-style as ``exp(clamp(prev − gen, −20, 20))`` "for numerical
safety", instead of NeMo-RL's ``nan_to_num(exp(prev − gen), nan=0, posinf=0, neginf=0)``.

For every ordinary token |prev − gen| is far below 20 nats and the two agree bit for bit. They part wherever the
log-ratio leaves ±20: at vLLM's logprob floor (``VLLM_LOGPROB_FLOOR = -9999.0``, nemo-rl-semantics §1.5)
NeMo-RL's weight overflows to +inf and is set to 0 — the token leaves the loss (§4.4: "w = nan_to_num(exp(prev -
gen)), with NaN and ±inf set to 0") — while this trainer weights it by e^20 ≈ 4.9e8 and lets that one token
dominate the step; below the overflow NeMo-RL uses the exact e^(prev−gen), this trainer e^±20. With plain IS
correction (the async default) the difference is the whole token; under `tis` NeMo-RL's 0 is raised to the lower
bound and this trainer's e^20 cut to the upper one; under `icepop` both drop a floored token.
"""

from __future__ import annotations

from unittest.mock import patch

import torch

from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.gradient"
SCENARIO = "importance-sampling-logprob-floor"


class Backend(ReferenceBackend):
    name = "is-log-ratio-clamped-not-zeroed"

    def train_step(self, state, batch, cfg):
        loss = T.clipped_pg_loss

        def loss_fn(cfg_, **kw):
            # the trainer's weights, fed through behaviour logprobs that give exactly them: where the log-ratio
            # leaves ±20, gen' = prev − clamp(prev − gen) (the loss then computes exp(prev − gen') = e^±20)
            prev, gen = kw["prev_logprobs"], kw["generation_logprobs"]
            log_w = (prev - gen).clamp(-20.0, 20.0)
            gen2 = torch.where((prev - gen).abs() > 20.0, prev - log_w, gen)
            return loss(cfg_, **{**kw, "generation_logprobs": gen2})

        with patch.object(T, "clipped_pg_loss", loss_fn):
            return super().train_step(state, batch, cfg)
