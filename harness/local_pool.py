"""Scenarios fanned out over local worker processes (``compactsim run --parallel N``, the local executor).

A scenario's outcome is a pure function of the scenario, the seed and the code, and each worker
pins torch to one thread (`configure_determinism`), so the results are the same bytes as a
sequential run; only `timings.json` differs. Workers are spawned (not forked: torch and the
servers' threads do not survive a fork), so each pays its imports once, which is why a single
scenario runs in this process instead. Longer scenarios are submitted first (more optimizer steps
and rollouts) so the last worker to finish is not the one that drew the 20-step run last; the
caller gets the runs back in the given order.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from compactsim.harness.core.errors import CompactsimError, ConfigError
from compactsim.harness.core.gc_passes import use_fewer_gc_passes

R = TypeVar("R")
#: Worker processes the commands use by default, capped by the CPU count: each pins torch to one thread.
DEFAULT_WORKERS = 2


def default_workers() -> int:
    """`DEFAULT_WORKERS`, or fewer when this process may use fewer CPUs (1 runs in the calling process)."""
    try:
        cpus = len(os.sched_getaffinity(0))  # what a container or taskset leaves this process
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(DEFAULT_WORKERS, cpus))


def cost_hint(scenario: Any) -> int:
    """A rough size of a scenario's work: steps × rollouts per step (scheduling only, never in an output)."""
    steps = int(getattr(scenario, "steps", 1) or 1)
    rollouts = int(getattr(scenario, "groups", 1) or 1) * int(getattr(scenario, "group_size", 1) or 1)
    return steps * rollouts


def run_in_processes(
    work: Callable[..., R],
    payloads: Sequence[tuple[Any, ...]],
    *,
    workers: int,
    costs: Sequence[int] | None = None,
    on_done: Callable[[int, R], None] | None = None,
) -> list[R]:
    """``work(*payloads[k])`` for every k on `workers` spawned processes; results in payload order.

    `work` must be a module-level function (it is pickled by reference). `on_done(k, result)` runs
    here, in completion order. A worker that dies (killed, out of memory) is a `ConfigError`
    naming the items left unfinished, not a hang; any other failure of an item is a `ConfigError`
    naming it (a `CompactsimError` passes as is), and the queued items are cancelled at once. Where
    worker processes cannot be created at all, the items run here, in order: the same results.
    """
    order = sorted(range(len(payloads)), key=lambda k: -(costs[k] if costs is not None else 0))
    out: list[Any] = [None] * len(payloads)
    others = set(multiprocessing.active_children())  # processes that are not this pool's workers
    try:
        context = multiprocessing.get_context("spawn")
        pool = ProcessPoolExecutor(max_workers=max(1, min(workers, len(payloads))), mp_context=context,
                                   initializer=use_fewer_gc_passes)
    except (OSError, NotImplementedError, ImportError):  # no semaphores here (e.g. no /dev/shm): same results, one process
        for k in range(len(payloads)):
            out[k] = work(*payloads[k])
            if on_done is not None:
                on_done(k, out[k])
        return out
    try:
        pending = {pool.submit(work, *payloads[k]): k for k in order}
        while pending:
            done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            broken = sorted(pending[f] for f in done if isinstance(f.exception(), BrokenProcessPool))
            if broken:
                unfinished = sorted({*broken, *(k for f, k in pending.items() if not f.done())})
                raise ConfigError("worker_failed", f"a worker process died with items {unfinished} unfinished "
                                                   "(killed, out of memory, or a crash in native code); rerun with "
                                                   "--parallel 1 to see which and why")
            for future in sorted(done, key=lambda f: pending[f]):
                k = pending.pop(future)
                try:
                    result = future.result()
                except CompactsimError:
                    raise
                except Exception as exc:  # e.g. a payload that does not pickle: typed, naming the item
                    raise ConfigError("worker_failed", f"item {k} failed in its worker: "
                                                       f"{type(exc).__name__}: {exc}") from exc
                out[k] = result
                if on_done is not None:
                    on_done(k, result)
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)  # fail now, not after the queued items ran
        for child in set(multiprocessing.active_children()) - others:  # nor after the running ones: this pool's
            child.terminate()  # workers (a SIGTERM used to wait 8-16 s for their items)
        raise
    pool.shutdown(wait=True)
    return out


__all__ = ["DEFAULT_WORKERS", "cost_hint", "default_workers", "run_in_processes"]
