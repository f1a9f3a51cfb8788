"""A CORRECT backend: rows dealt round-robin to the dp ranks (veRL seqlen-balancing style) instead of contiguous blocks; the mean all-reduce x dp_size still yields the global-token-mean gradient."""

from __future__ import annotations

from tests.quality.correct_own_step import Backend as _Own, Opts

SCENARIO = "layout-dp4-microbatch1"


class Backend(_Own):
    name = "correct-round-robin-ranks"
    opts = Opts(layout="round_robin")
