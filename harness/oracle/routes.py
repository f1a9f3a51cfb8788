"""Expected router-replay routes of one training row, position by position, from the agents' ground truth.

The rule, stated per row position ``t`` of a physical trace whose calls are ``c_0 .. c_n`` (each
call's recorded routes cover its prompt + sampled tokens, vLLM-packed: the final row of a call is
the decode placeholder ``arange(K)``; `shared/reference/nemo-rl-semantics.md` §1.6, §2.2, §2.8):

1. **Owner.** Position ``t`` belongs to the first call of the trace whose prompt + sampled ids
   reach past ``t``; the route is that call's recorded row ``t`` (a call that recorded no
   routes contributes all ``-1``: NeMo-RL's `backfill_missing_routed_experts`, §2.4).
2. **Repair.** When ``t`` is the final token of a call that is not the trace's last call, the
   owner's row is only a placeholder (vLLM never ran that token through the model). The next
   call's prefill did, so the route is the next call's row ``t`` (§1.6: ``routed_experts[len(seen) - 1]``);
   when the next call recorded no routes, nothing real is known and the route is ``-1``.
3. **Boundary.** The final token of a non-final trace has no next prefill inside its trace
   (the next call starts a new trace after a rewrite): it carries the sentinel ``-1``, never the
   placeholder (the reference PR's router-replay finding). The final token of the rollout's
   last trace keeps the placeholder, which predicts past the end and trains nothing (§2.8).

This module is written from that statement alone; it shares no code with the pipeline's routes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: NeMo-RL's ROUTED_EXPERTS_MISSING_ROUTE_SENTINEL (§2.1): an all -1 row means "use the router".
SENTINEL = -1


@dataclass(frozen=True, slots=True)
class CallRoutes:
    """One call of a trace as the route rule needs it: how many tokens it spans, and its recorded routes."""

    num_tokens: int  # len(prompt) + len(sampled)
    routes: np.ndarray | None  # (>= num_tokens, L, K) as recorded, or None when the call recorded none


@dataclass(frozen=True, slots=True, eq=False)
class RowRoutes:
    """The expected routes of one row and the positions the audit names in findings."""

    routes: np.ndarray  # (T, L, K) int64
    sentinel_positions: tuple[int, ...]  # boundary sentinels (rule 3)
    repaired_positions: tuple[int, ...]  # placeholders repaired from the next call's prefill (rule 2)


def _owner(ends: Sequence[int], t: int) -> int:
    """Index of the first call whose token span reaches past position t."""
    for i, end in enumerate(ends):
        if t < end:
            return i
    raise ValueError(f"position {t} lies beyond the trace's last call ({ends[-1]} tokens)")


def expected_row_routes(calls: Sequence[CallRoutes], layout: tuple[int, int], *, is_final_trace: bool) -> RowRoutes:
    """Routes (T, L, K) of a trace's row in the batch's [L, K] layout, by the three rules above."""
    if not calls:
        raise ValueError("a trace has at least one call")
    ends = [c.num_tokens for c in calls]
    total = ends[-1]
    out = np.full((total, *layout), SENTINEL, dtype=np.int64)
    sentinels: list[int] = []
    repaired: list[int] = []
    call_final_tokens = {end - 1: i for i, end in enumerate(ends[:-1])}  # final token of every non-last call
    for t in range(total):
        if t == total - 1 and not is_final_trace:
            sentinels.append(t)  # rule 3: row stays -1
            continue
        i = _owner(ends, t)
        source = calls[i]
        if t in call_final_tokens and call_final_tokens[t] == i:
            source = calls[i + 1]  # rule 2: the next call's prefill holds the real route
            if source.routes is not None:
                repaired.append(t)
        if source.routes is not None:
            out[t] = source.routes[t]
    return RowRoutes(out, tuple(sentinels), tuple(repaired))


__all__ = ["SENTINEL", "CallRoutes", "RowRoutes", "expected_row_routes"]
