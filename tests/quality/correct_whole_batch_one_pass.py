"""A CORRECT backend: the whole logical batch in one forward/backward (one rank, one micro-batch at the full batch width) instead of the dp x micro-batch layout. Each micro-batch loss is normalised by the global count, so the sum over any partition is the same gradient (NeMo-RL §4.6); micro-batching is a memory choice."""

from __future__ import annotations

from tests.quality.correct_own_step import Backend as _Own, Opts

SCENARIO = "layout-dp2-kl-steps-clip-binds"


class Backend(_Own):
    name = "correct-whole-batch-one-pass"
    opts = Opts(layout="whole")
