"""Fewer garbage-collector passes while compactsim builds and keeps large JSON trees.

CPython's default thresholds ``(700, 10, 10)`` start a young-generation pass every 700 net
container allocations and a full pass every 100 of those. Decoding one rollout's responses
creates tens of thousands of lists and dicts that all stay reachable, so the passes free nothing,
and every full pass also walks every long-lived object (torch, pydantic models, the results kept
so far). `bench/bench_rollouts.py` measured it at about a third of rollout collection time (one
thread: 19 rollouts/s with the defaults, 28 with `THRESHOLDS`). Reference cycles are still
collected, only less often; no result depends on when.

The thresholds are process-wide. `fewer_gc_passes()` raises them while at least one block is
open, on any thread (collection uses it), and the last block to close puts back what the first
found (undoing any change made meanwhile); `use_fewer_gc_passes()` raises them for good, for entry
points that own their process (the command line, spawned workers, the test session).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: (young, middle, full): a young pass per 10,000 allocations, a full one per 2,500 young passes.
THRESHOLDS = (10_000, 50, 50)

_lock = threading.Lock()
_depth = 0
_saved: tuple[int, ...] = ()


def _raised(current: tuple[int, ...]) -> tuple[int, ...]:
    """`THRESHOLDS`, never lowering a threshold someone already raised (0 = that collection is off)."""
    return tuple(c if c == 0 or c >= t else t for c, t in zip(current, THRESHOLDS))


def use_fewer_gc_passes() -> None:
    """Raise the thresholds for the rest of this process (entry points only: it is process-wide)."""
    gc.set_threshold(*_raised(gc.get_threshold()))


@contextmanager
def fewer_gc_passes() -> Iterator[None]:
    """Raise the thresholds inside the block; the first block to enter saves them, the last to leave restores them."""
    global _depth, _saved
    with _lock:
        if _depth == 0:
            _saved = gc.get_threshold()
            gc.set_threshold(*_raised(_saved))
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                gc.set_threshold(*_saved)


__all__ = ["THRESHOLDS", "fewer_gc_passes", "use_fewer_gc_passes"]
