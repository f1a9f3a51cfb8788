"""Broken backend: the last rank's shard loses its last row (an off-by-one in the shard's end index).

`batch.microbatch_rows(rank)` cuts each rank's rows; here the last rank's last micro-batch stops one row
short (`rows[start:end-1]`), so that row never trains, while the global normalisers still count it.
"""

from __future__ import annotations

from unittest.mock import patch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.gradient"
SCENARIO = "layout-dp4-microbatch1"


class Backend(ReferenceBackend):
    name = "dp-shard-drops-last-row"

    def train_step(self, state, batch, cfg):
        original = TraceBatch.microbatch_rows

        def rows(self_, rank):
            out = list(original(self_, rank))
            if rank == self_.dp_size - 1 and out:
                last = out[-1]
                out[-1] = range(last.start, max(last.start, last.stop - 1))
                if not len(out[-1]):
                    out.pop()
            return out

        with patch.object(TraceBatch, "microbatch_rows", rows):
            return super().train_step(state, batch, cfg)
