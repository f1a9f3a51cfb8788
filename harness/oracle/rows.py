"""Expected training rows: one per physical trace, written out token by token from the ground truth.

A row is its trace's last prompt + that call's sampled ids. Trainable positions are each call's
own sampled ids, at [len(prompt), len(prompt) + len(sampled)) — inside one trace every earlier
call's sampled ids sit at those positions of the final row, because each prompt extends the
previous context. Behaviour logprobs are the recorded ones in position order; each trainable
token carries its parent's logical advantage. The row's images are *all* the images of its
last prompt (a new trace re-owns every image it still shows); each is identified by the sha256
of its RGB pixels decoded here with Pillow.

Routes: `compactsim.harness.oracle.routes` states the rule position by position (owner call, repair of a
call's final placeholder from the next prefill, the boundary sentinel −1).
"""

from __future__ import annotations

import base64
import hashlib
import io
from collections.abc import Mapping, Sequence

import numpy as np

from compactsim.harness.core.errors import ConfigError
from compactsim.harness.core.expectations import ExpectedRow
from compactsim.harness.core.trace_plan import physical_trace_id
from compactsim.harness.oracle.plan import PlanTruth, TraceTruth, routes_of
from compactsim.harness.oracle.routes import CallRoutes, expected_row_routes


def decode_rgb(url: str) -> np.ndarray:
    """A data-URL image as its RGB uint8 pixels, (H, W, 3) row-major, decoded with Pillow."""
    from PIL import Image

    head, sep, body = url.partition(",")
    if not sep or not head.startswith("data:image/") or not head.endswith(";base64"):
        raise ConfigError("invalid_argument", f"media data URL {url[:40]!r}: expected data:image/<type>;base64,...")
    with Image.open(io.BytesIO(base64.b64decode(body, validate=True))) as im:
        return np.asarray(im.convert("RGB"), dtype=np.uint8)  # (H, W, 3)


def pixel_digest_of_data_url(url: str) -> str:
    """sha256 of the image's RGB uint8 pixels, (H, W, 3) row-major (`decode_rgb`)."""
    return hashlib.sha256(np.ascontiguousarray(decode_rgb(url)).tobytes()).hexdigest()


def trace_routes(
    trace: TraceTruth, layout: tuple[int, int], *, is_final_trace: bool
) -> tuple[np.ndarray, tuple[int, ...], tuple[int, ...]]:
    """(routes (T, L, K), sentinel positions, repaired positions) of one row in the batch's [L, K] layout.

    The rule lives in `compactsim.harness.oracle.routes` (stated position by position from the reference).
    """
    calls = [CallRoutes(c.num_tokens, routes_of(c)) for c in trace.calls]
    row = expected_row_routes(calls, layout, is_final_trace=is_final_trace)
    return row.routes, row.sentinel_positions, row.repaired_positions


def expected_rows(
    plan: PlanTruth,
    *,
    advantage: float,
    mask_sample: bool,
    route_layout: tuple[int, int] | None,
    pixel_digests: Mapping[str, str] | None = None,
) -> tuple[ExpectedRow, ...]:
    """Rows of one valid rollout plan; `route_layout` is the batch's [L, K] when it carries routes at all.

    `pixel_digests` caches digests by media id (filled as images are decoded).
    """
    if plan.error is not None:
        return ()
    truth = plan.truth
    cache: dict[str, str] = pixel_digests if isinstance(pixel_digests, dict) else dict(pixel_digests or {})
    rows: list[ExpectedRow] = []
    for trace in plan.traces:
        last = trace.last
        spans: list[tuple[int, int]] = []
        logprobs: list[float] = []
        for call in trace.calls:
            if call.sampled:
                start = len(call.prompt)
                spans.append((start, start + len(call.sampled)))
                logprobs.extend(call.logprobs)
        digests = []
        for media_id in last.media_ids:
            if media_id not in cache:
                url = truth.media.get(media_id)
                if url is None:
                    raise ConfigError("invalid_argument", f"rollout {truth.rollout_id!r}: media {media_id!r} is not in the log's media table")
                cache[media_id] = pixel_digest_of_data_url(url)
            digests.append(cache[media_id])
        routes = None
        sentinels: tuple[int, ...] = ()
        repaired: tuple[int, ...] = ()
        is_final = trace.index == len(plan.traces) - 1
        if route_layout is not None:
            routes, sentinels, repaired = trace_routes(trace, route_layout, is_final_trace=is_final)
        rows.append(
            ExpectedRow(
                physical_trace_id=physical_trace_id(truth.rollout_id, trace.index),
                logical_rollout_id=truth.rollout_id,
                trace_index=trace.index,
                input_ids=last.prompt + last.sampled,
                mask_spans=tuple(spans),
                generation_logprobs=tuple(logprobs),
                advantage=advantage,
                sample_mask=0.0 if mask_sample else 1.0,
                media_ids=last.media_ids,
                pixel_digests=tuple(digests),
                sentinel_positions=sentinels,
                repaired_positions=repaired,
                generation_policy_version=last.policy_version,
                routes=routes,
            )
        )
    return tuple(rows)


def batch_route_layout(plans: Sequence[PlanTruth]) -> tuple[int, int] | None:
    """The [L, K] of the first call with routes in batch order, or None when no call has routes."""
    for plan in plans:
        for call in plan.truth.calls:
            r = routes_of(call)
            if r is not None and r.ndim == 3:
                return int(r.shape[1]), int(r.shape[2])
    return None


__all__ = ["batch_route_layout", "decode_rgb", "expected_rows", "pixel_digest_of_data_url", "trace_routes"]
