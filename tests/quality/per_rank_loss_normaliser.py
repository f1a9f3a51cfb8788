"""Broken backend: each data-parallel rank divides its loss by its *own* count of trained tokens, and the all-reduce
averages the ranks' gradients — the plain-DDP "mean of per-rank means".

NeMo-RL normalises every micro-batch by the valid-token count of the whole global batch, all-reduced across ranks
(nemo-rl-semantics §4.6: "``N_tok = all_reduce_DP Σ(token_mask[:,1:] · sample_mask)``, computed per global batch ...
The result is the exact mean over the global batch's valid tokens"). Per-rank normalisation weighs a token on a rank
with few trained tokens more than one on a busy rank; the two agree only when every rank trains as many tokens.
"""

from __future__ import annotations

from unittest.mock import patch

from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.gradient"
SCENARIO = "layout-dp4-microbatch1"  # four ranks of one row each: the ranks train different token counts


class Backend(ReferenceBackend):
    name = "per-rank-loss-normaliser"

    def train_step(self, state, batch, cfg):
        per_mb = []  # (rank tokens) of each micro-batch, in the order the trainer runs them
        for rank in range(batch.dp_size):
            idx = list(batch.rank_rows(rank))
            mbs = batch.microbatch_rows(rank)
            n = T.valid_counts(batch.row_token_mask[idx], batch.row_sample_mask[idx]).tokens
            per_mb += [n] * len(mbs)
        queue = iter(per_mb)
        loss = T.clipped_pg_loss

        def local(cfg_, **kw):
            # dp · N_rank: the trainer scales by dp before the mean all-reduce, so each rank's share is Σ_rank / N_rank
            return loss(cfg_, **{**kw, "global_valid_tokens": batch.dp_size * next(queue)})

        with patch.object(T, "clipped_pg_loss", local):
            return super().train_step(state, batch, cfg)
