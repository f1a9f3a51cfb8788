"""The `routed_experts` field of rows-dump and golden row lines: a row's replayed routes as nested lists.

``routed_experts[t][l][k]`` is the expert id at top-k slot ``k`` of MoE layer ``l`` that router
replay feeds for row position ``t`` (−1: the sentinel, "use the router"); one entry per token of
``input_ids``, the same ``[layers][topk]`` at every position. What a trainer holds as a
``[tokens, layers, topk]`` integer tensor, written with ``.tolist()``.

Why numpy and not the JSON Schema: a schema walk costs ~25 ms for one 700-token row (every id is
a Python call), numpy ~0.3 ms, and the goldens and dumps hold thousands of rows. The published
schema states the same shape; this module enforces it and, when the fast path refuses, walks the
lists once to name the first bad entry.
"""

from __future__ import annotations

from itertools import chain
from typing import Any

import numpy as np

from compactsim.harness.core.contract import INT32_LIMIT

FIELD = "routed_experts"


class RoutesFieldError(ValueError):
    """`field` (e.g. ``routed_experts[3][1]``) and what is wrong with it."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


def _is_int(x: Any) -> bool:
    """JSON integers, and integral floats (``2.0``) as the dump's other integer fields admit; never bools."""
    if type(x) is int:
        return -1 <= x < INT32_LIMIT
    return type(x) is float and x.is_integer() and -1 <= x < INT32_LIMIT


def _first_problem(value: list[Any]) -> RoutesFieldError:
    """Walk the lists to the first entry that breaks the [tokens][layers][topk] shape or the id range."""
    shape: tuple[int, int] | None = None
    for t, token in enumerate(value):
        if not isinstance(token, list) or not token:
            return RoutesFieldError(f"{FIELD}[{t}]", f"expected a non-empty list of layers, got {token!r:.60}")
        for li, layer in enumerate(token):
            if not isinstance(layer, list) or not layer:
                return RoutesFieldError(f"{FIELD}[{t}][{li}]", f"expected a non-empty list of top-k expert ids, got {layer!r:.60}")
            for k, x in enumerate(layer):
                if not _is_int(x):
                    return RoutesFieldError(f"{FIELD}[{t}][{li}][{k}]",
                                            f"expected an expert id, an integer in [-1, {INT32_LIMIT}), got {x!r:.60}")
        here = (len(token), len(token[0]))
        if any(len(layer) != here[1] for layer in token):
            return RoutesFieldError(f"{FIELD}[{t}]", "layers have different top-k lengths")
        if shape is None:
            shape = here
        elif here != shape:
            return RoutesFieldError(f"{FIELD}[{t}]", f"has [layers, topk] {list(here)}; position 0 has {list(shape)}")
    return RoutesFieldError(FIELD, "is not a [tokens][layers][topk] array of expert ids")


def parse_routes(value: Any, n_tokens: int) -> np.ndarray:
    """`value` as an int64 array (n_tokens, layers, topk); `RoutesFieldError` names the first bad entry.

    An empty list stands for a row without tokens (a padding row): shape (0, 0, 0).
    """
    if not isinstance(value, list):
        raise RoutesFieldError(FIELD, f"expected a list (one entry per token), got {type(value).__name__}")
    if len(value) != n_tokens:
        raise RoutesFieldError(FIELD, f"has {len(value)} entries; input_ids has {n_tokens} (one per token)")
    if not value:
        return np.zeros((0, 0, 0), dtype=np.int64)
    try:
        # type() of every id in C: numpy would read True as 1 in a list that also holds ints
        kinds = set(map(type, chain.from_iterable(chain.from_iterable(value))))
        arr = np.array(value)
    except (ValueError, OverflowError, TypeError):  # not lists of lists, ragged lists, huge ints
        raise _first_problem(value) from None
    if not kinds <= {int, float}:
        raise _first_problem(value)
    if arr.ndim != 3 or arr.shape[1] == 0 or arr.shape[2] == 0 or arr.dtype.kind not in "if":
        raise _first_problem(value)
    if arr.dtype.kind == "f" and not (np.isfinite(arr).all() and (arr == np.floor(arr)).all()):
        raise _first_problem(value)
    if arr.min() < -1 or arr.max() >= INT32_LIMIT:
        raise _first_problem(value)
    return arr.astype(np.int64, copy=False)


def routes_json(routes: np.ndarray) -> list[Any]:
    """A (tokens, layers, topk) integer array as the field's nested lists."""
    return np.asarray(routes, dtype=np.int64).tolist()


__all__ = ["FIELD", "RoutesFieldError", "parse_routes", "routes_json"]
