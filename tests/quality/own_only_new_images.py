"""Broken backend: a row that starts at a compaction boundary owns only the images new to it.

The images it still shows from before the boundary are dropped from the row, together with
their placeholder tokens (as a consumer that transports only new media would render it), so
the trainer runs without error and only the audit sees the missing image history.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch

from compactsim.harness.core import tokenizer as tok
from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.core.trace_plan import TracePlan
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig

EXPECTED_CHECK = "row.media"
SCENARIO = "image-compaction-k2-rolling"


def _spans(mask: torch.Tensor) -> tuple[tuple[int, int], ...]:
    on = (mask != 0).tolist()
    out: list[tuple[int, int]] = []
    start = None
    for p, v in enumerate([*on, False]):
        if v and start is None:
            start = p
        elif not v and start is not None:
            out.append((start, p))
            start = None
    return tuple(out)


class Backend(ReferenceBackend):
    """Drops re-owned images (and their `<|image|>` tokens) from continuation rows."""

    name = "own-only-new-images"

    def materialize(self, plans: Sequence[TracePlan], cfg: TrainerConfig) -> TraceBatch:
        b = super().materialize(plans, cfg)
        ids, mask, lp, adv = (t.clone() for t in (b.row_input_ids, b.row_token_mask, b.row_generation_logprobs,
                                                   b.row_advantages))
        lengths = b.row_input_lengths.clone()
        routes = None if b.routed_experts is None else b.routed_experts.clone()
        media, pixels, spans, sentinels = list(b.row_media_ids), list(b.row_pixel_values), list(b.row_mask_spans), \
            list(b.row_sentinel_positions)
        seen: dict[int, set[str]] = {}
        parents = b.parent_indices.tolist()
        order = sorted(range(b.num_rows), key=lambda r: (parents[r], int(b.row_trace_index[r])))
        for r in order:
            p = parents[r]
            if p < 0:
                continue
            old = seen.setdefault(p, set())
            drop = [k for k, m in enumerate(b.row_media_ids[r]) if m in old]
            old.update(b.row_media_ids[r])
            if not drop:
                continue
            n = int(b.row_input_lengths[r])
            image_pos = [q for q in range(n) if int(b.row_input_ids[r, q]) == tok.IMAGE]
            cut = {q for k in drop for q in image_pos[k * tok.IMAGE_PATCH_TOKENS:(k + 1) * tok.IMAGE_PATCH_TOKENS]}
            keep = torch.tensor([q for q in range(n) if q not in cut], dtype=torch.long)
            m = len(keep)
            for t, fill in ((ids, cfg.policy.pad_token_id), (mask, 0), (lp, 0), (adv, 0)):
                row = t[r, keep].clone()
                t[r] = fill
                t[r, :m] = row
            if routes is not None:
                row = routes[r, keep].clone()
                routes[r] = torch.arange(routes.shape[-1], dtype=routes.dtype)
                routes[r, :m] = row
            lengths[r] = m
            new_pos = {int(q): i for i, q in enumerate(keep.tolist())}
            media[r] = tuple(x for k, x in enumerate(b.row_media_ids[r]) if k not in drop)
            pixels[r] = tuple(x for k, x in enumerate(b.row_pixel_values[r]) if k not in drop)
            spans[r] = _spans(mask[r])
            sentinels[r] = tuple(new_pos[q] for q in b.row_sentinel_positions[r] if q in new_pos)
        return replace(b, row_input_ids=ids, row_token_mask=mask, row_generation_logprobs=lp, row_advantages=adv,
                       row_input_lengths=lengths, routed_experts=routes, row_media_ids=tuple(media),
                       row_pixel_values=tuple(pixels), row_mask_spans=tuple(spans), row_sentinel_positions=tuple(sentinels))
