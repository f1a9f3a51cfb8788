"""A CORRECT backend: every micro-batch runs at the batch's full padded width S (rounded up to
make_sequence_length_divisible_by, as NeMo-RL's workers feed the model) instead of being cut to its longest row.
Right padding under a causal model changes no real position's logits, only the matmul shapes (rounding)."""

from __future__ import annotations

from tests.quality.correct_own_step import Backend as _Own, Opts

SCENARIO = "layout-sequence-divisible-by-64"


class Backend(_Own):
    name = "correct-padded-full-width"
    opts = Opts(full_width=True)
