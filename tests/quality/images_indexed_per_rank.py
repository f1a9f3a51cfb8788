"""Broken backend: under dp > 1 each rank looks its rows' images up by rank-local row index.

Token ids, masks and routes are sliced by the global row range `batch.microbatch_rows(rank)` gives, but
the image list is indexed as if the rank's shard started at row 0 (a shard's own `PackedTensor` indexed with
the global offset dropped), so every rank but the first trains its rows with rank 0's screenshots. Where
the image counts differ the policy raises; where they agree, wrong pixels train silently.
"""

from __future__ import annotations

from unittest.mock import patch

from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.gradient"
SCENARIO = "layout-dp4-microbatch1"


class Backend(ReferenceBackend):
    name = "images-indexed-per-rank"

    def train_step(self, state, batch, cfg):
        original = T._slice
        starts = {rank: min(r.start for r in batch.microbatch_rows(rank)) for rank in range(batch.dp_size)
                  if list(batch.microbatch_rows(rank))}

        def sliced(batch_, rows, row_images, row_routes, device):
            mb = original(batch_, rows, row_images, row_routes, device)
            shard = max(s for s in starts.values() if s <= rows.start)
            local = [row_images[i - shard] for i in rows]
            if [len(x) for x in local] != [len(x) for x in mb.images]:
                return mb  # the policy would refuse the count; the bug only bites where counts agree
            return T._Microbatch(**{**{f: getattr(mb, f) for f in mb.__slots__}, "images": local})

        with patch.object(T, "_slice", sliced):
            return super().train_step(state, batch, cfg)
