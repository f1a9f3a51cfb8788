"""Misreporting backend: the driver reduces the per-rank loss metrics by summing them, except the fractions:
``is_oob_ratio`` ("a ratio of tokens, not a sum") is averaged over the data-parallel ranks.

Each rank's contribution is already divided by the *global* trained-token count, so the step's value is the sum over
ranks; the mean reports it ``dp_size`` times too small. On one rank both reductions agree. ``is_oob_ratio`` is only
reported under truncated importance sampling, which no catalogue scenario combines with ``dp_size > 1``.
"""

from __future__ import annotations

import math
from unittest.mock import patch

from compactsim.harness.pipeline import trainer as trainer_module
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.metric"
EXPECTED_KEY = "is_oob_ratio"
SCENARIO = "truncated-importance-sampling-dp2"

_combine = trainer_module.combine_metrics


class Backend(ReferenceBackend):
    name = "is-oob-ratio-mean-over-ranks"

    def train_step(self, state, batch, cfg):
        counts = [len(list(batch.microbatch_rows(rank))) for rank in range(batch.dp_size)]

        def combine(per_microbatch):
            out = _combine(per_microbatch)
            if "is_oob_ratio" in out and batch.dp_size > 1:
                per_rank, k = [], 0
                for c in counts:
                    per_rank.append(math.fsum(float(m["is_oob_ratio"]) for m in per_microbatch[k:k + c]))
                    k += c
                out["is_oob_ratio"] = math.fsum(per_rank) / batch.dp_size
            return out

        with patch.object(trainer_module, "combine_metrics", combine):
            return super().train_step(state, batch, cfg)
