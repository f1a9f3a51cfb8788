"""A CORRECT backend: micro-batches of one row each at that row's own length, padding rows skipped (they carry sample_mask 0 and contribute exactly zero). Same global-count normalisation, same gradient."""

from __future__ import annotations

from tests.quality.correct_own_step import Backend as _Own, Opts

SCENARIO = "layout-dp2-microbatch2-mask-sample"  # two-row micro-batches split per row, a padding row skipped


class Backend(_Own):
    name = "correct-row-microbatches"
    opts = Opts(layout="rows")
