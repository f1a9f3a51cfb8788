"""Router replay: per-call routed experts (vLLM packing) → one route tensor per physical row.

vLLM packs each call's routes as `[len(prompt) + len(sampled), L, K]` (at most one surplus
final-token row): prefill rows for the prompt, decode rows for the sampled tokens, rows it could
not capture set to -1, and the final token's row a placeholder `arange(K)`, because the last
sampled token is never fed through the model. Inside a physical trace the next call's prefill
holds the real route of that token, so the placeholder is repaired from it. At a compaction
boundary there is no next prefill inside the trace: the last token of every non-final physical
trace gets the missing-route sentinel (-1, the router decides at replay), never the placeholder
and never a route taken from the next trace. Tokens of calls without routes are backfilled with
-1; positions past a row's end use `arange(K)`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from compactsim.harness.core.batch import MISSING_ROUTE_SENTINEL
from compactsim.harness.core.errors import ContractError
from compactsim.harness.core.evidence import ModelCall


def call_routes(call: ModelCall, *, rollout_id: str) -> np.ndarray | None:
    """The call's routes as `[prompt + sampled, L, K]` (surplus row dropped), or None without routes.

    Raises `ContractError("routed_experts_shape")` unless the array is 3-D integer with
    `prompt + sampled` or `prompt + sampled + 1` rows.
    """
    routes = call.routed_experts
    if routes is None:
        return None
    arr = np.asarray(routes)
    valid = call.num_tokens
    if arr.ndim != 3 or not np.issubdtype(arr.dtype, np.integer) or arr.shape[1] < 1 or arr.shape[2] < 1:
        raise ContractError(
            "routed_experts_shape",
            rollout_id=rollout_id,
            turn_id=call.turn_id,
            detail=f"routed_experts must be an integer array [tokens, layers, topk], got {arr.dtype} "
            f"shape {list(arr.shape)}",
        )
    rows = arr.shape[0]
    if rows < valid or rows > valid + 1:
        raise ContractError(
            "routed_experts_shape",
            rollout_id=rollout_id,
            turn_id=call.turn_id,
            detail=f"routed_experts has {rows} rows for {valid} tokens (prompt {len(call.prompt_token_ids)} + "
            f"sampled {len(call.sampled_token_ids)}); vLLM packing allows {valid} or {valid + 1} "
            "(at most one surplus final-token route)",
        )
    return arr[:valid]


def trace_route_layout(
    calls: Sequence[ModelCall], routes: Sequence[np.ndarray | None], *, rollout_id: str
) -> tuple[int, int] | None:
    """`(L, K)` shared by the trace's routed calls, or None when none has routes.

    Calls of one trace must agree (`routed_experts_shape` otherwise).
    """
    layout: tuple[int, int] | None = None
    for call, r in zip(calls, routes, strict=True):
        if r is None:
            continue
        this = (int(r.shape[1]), int(r.shape[2]))
        if layout is not None and this != layout:
            raise ContractError(
                "routed_experts_shape",
                rollout_id=rollout_id,
                turn_id=call.turn_id,
                detail=f"routed_experts has [layers, topk]={list(this)} but earlier calls of the trace have {list(layout)}",
            )
        layout = this
    return layout


def route_dtype(arrays: Sequence[np.ndarray]) -> torch.dtype:
    """The carry dtype: int16 when every input fits 16 bits, else int32 (both hold the -1 sentinel)."""
    wide = any(a.dtype.itemsize > 2 or a.dtype == np.uint16 for a in arrays)
    return torch.int32 if wide else torch.int16


def fill_padding_routes(out: np.ndarray) -> None:
    """Set every row of `out` (..., L, K) to the placeholder `arange(K)`."""
    out[...] = np.arange(out.shape[-1], dtype=out.dtype)


def fill_trace_routes(
    out: np.ndarray,
    calls: Sequence[ModelCall],
    routes: Sequence[np.ndarray | None],
    *,
    is_final_trace: bool,
) -> tuple[int, ...]:
    """Write one physical row's routes into `out` (S, L, K); return the boundary sentinel positions.

    `out[:T]` (T = the last call's prompt + sampled) is filled call by call with each call's own
    rows for the tokens it added (prompt delta from its prefill, sampled tokens from decode), the
    previous call's final token is repaired from this call's prefill (or set to -1 when this call
    has no routes), and the trace's final token becomes -1 when the trace is not the rollout's last.
    Positions from T on are left untouched (the caller fills them with `arange(K)`).
    """
    done = 0  # tokens of the row already written (= previous call's prompt + sampled)
    for call, r in zip(calls, routes, strict=True):
        end = call.num_tokens
        if r is None:
            out[done:end] = MISSING_ROUTE_SENTINEL  # backfill: the router decides at replay
        else:
            out[done:end] = r[done:end]
        if done > 0:
            # the previous call's final token: its decode row was a placeholder; this prefill has the real route
            out[done - 1] = MISSING_ROUTE_SENTINEL if r is None else r[done - 1]
        done = end
    if not is_final_trace and done > 0:
        out[done - 1] = MISSING_ROUTE_SENTINEL  # no next prefill inside this trace: never the placeholder
        return (done - 1,)
    return ()


__all__ = ["call_routes", "fill_padding_routes", "fill_trace_routes", "route_dtype", "trace_route_layout"]
