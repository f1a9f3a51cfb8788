"""Trace views: each logical rollout of a step as its physical rows, each row as classed token spans.

A position's classes: `prompt` (context, not trained), `sampled` (trained), `boundary` (the
last token of a non-final physical trace: a compaction boundary cuts there), `sentinel` (its
replayed route is the all -1 sentinel), `padding` (past the row's length, or a padding row),
`image` (an image placeholder token) and `flagged` (an audit finding points at it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from compactsim.harness.audit import Finding, ObservedRow, ObservedStep
from compactsim.harness.core import tokenizer as tok
from compactsim.harness.report.records import RolloutView, RowView, TokenSpan

#: At most this many tokens of a row are drawn; the rest is summarised as one span.
MAX_TOKENS_PER_ROW = 2048


def _sentinels(row: ObservedRow) -> tuple[int, ...]:
    if row.routes is None:
        return tuple(row.declared_sentinel_positions)
    n = min(row.length, row.routes.shape[0])
    if n <= 0:
        return ()
    flat = row.routes[:n].reshape(n, -1)
    return tuple(int(p) for p in np.flatnonzero(np.all(flat == -1, axis=1)))


def position_classes(row: ObservedRow, is_final_trace: bool, flagged: Iterable[int] = ()) -> list[tuple[str, ...]]:
    """The classes of every position of `row` up to its padded width (or `MAX_TOKENS_PER_ROW`)."""
    width = min(int(row.input_ids.shape[0]), MAX_TOKENS_PER_ROW)
    sentinels = set(_sentinels(row))
    flags = set(flagged)
    out: list[tuple[str, ...]] = []
    for p in range(width):
        if row.is_padding or p >= row.length:
            classes = ["padding"]
        else:
            classes = ["sampled" if row.token_mask[p] != 0 else "prompt"]
            if int(row.input_ids[p]) == tok.IMAGE:
                classes.append("image")
            if not is_final_trace and p == row.length - 1:
                classes.append("boundary")
            if p in sentinels:
                classes.append("sentinel")
        if p in flags:
            classes.append("flagged")
        out.append(tuple(classes))
    return out


def row_spans(row: ObservedRow, is_final_trace: bool, flagged: Iterable[int] = ()) -> tuple[TokenSpan, ...]:
    """Consecutive positions with equal classes merged into spans, each with its readable text."""
    classes = position_classes(row, is_final_trace, flagged)
    spans: list[TokenSpan] = []
    start = 0
    ids = [int(t) for t in row.input_ids[: len(classes)]]
    for p in range(1, len(classes) + 1):
        if p == len(classes) or classes[p] != classes[start]:
            if "padding" in classes[start]:
                text = f"<pad ×{p - start}>"
            else:
                text = tok.describe(ids[start:p])
            spans.append(TokenSpan(start, p, classes[start], text))
            start = p
    if int(row.input_ids.shape[0]) > MAX_TOKENS_PER_ROW:
        spans.append(TokenSpan(MAX_TOKENS_PER_ROW, int(row.input_ids.shape[0]), ("elided",),
                               f"… {int(row.input_ids.shape[0]) - MAX_TOKENS_PER_ROW} more tokens"))
    return tuple(spans)


def rollout_views(step: ObservedStep, findings: Sequence[Finding] = (), *, include_padding: bool = True) -> tuple[RolloutView, ...]:
    """One view per logical rollout (in `logical` order), then one for the padding rows if any."""
    flagged: dict[str | None, set[int]] = {}
    for f in findings:
        if f.step == step.step and f.row is not None and f.position is not None and f.check.startswith("row.") \
                and f.check not in ("row.media", "row.pixels"):
            flagged.setdefault(f.row, set()).add(f.position)
    by_parent: dict[int, list[ObservedRow]] = {}
    for row in step.rows:
        by_parent.setdefault(row.parent_index, []).append(row)
    views: list[RolloutView] = []
    for rec in step.logical:
        rows = sorted(by_parent.get(rec.index, []), key=lambda r: (r.trace_index, r.row_index))
        last = max((r.trace_index for r in rows), default=-1)
        views.append(RolloutView(
            step=step.step, rollout_id=rec.rollout_id, reward=rec.reward, advantage=rec.advantage,
            rows=tuple(_row_view(r, r.trace_index == last, flagged.get(r.physical_trace_id, set())) for r in rows),
        ))
    padding = by_parent.get(-1, [])
    if include_padding and padding:
        views.append(RolloutView(step=step.step, rollout_id=None, reward=None, advantage=None,
                                 rows=tuple(_row_view(r, True, set()) for r in padding)))
    return tuple(views)


def _row_view(row: ObservedRow, is_final: bool, flagged: set[int]) -> RowView:
    return RowView(
        row_index=row.row_index,
        physical_trace_id=row.physical_trace_id,
        trace_index=row.trace_index,
        length=row.length,
        spans=row_spans(row, is_final, flagged),
        media_ids=row.media_ids,
        pixel_digests=row.pixel_digests,
        sentinel_positions=_sentinels(row) if not row.is_padding else (),
        flagged_positions=tuple(sorted(flagged)),
    )


__all__ = ["MAX_TOKENS_PER_ROW", "position_classes", "rollout_views", "row_spans"]
