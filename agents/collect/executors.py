"""Where rollouts run: threads in this process, spawned worker processes, or Ray actors.

Every executor returns the same results in input order (rollouts are independent and the
servers answer as pure functions of the request), so the choice is about speed only:

- `LocalExecutor` (the default): threads sharing one client per server. The agent, the
  in-process servers and JSON all hold the GIL, so more threads mostly overlap waiting, not work.
- `ProcessExecutor`: spawned processes, each opening its own servers (`Servers.open`) and
  running its share of the rollouts in order. Use it as a context manager to keep the processes
  (and their imports) across collections; used bare, each `map` starts and stops its own.
- `RayExecutor`: the same on Ray actors on a loopback-only Ray instance.
"""

from __future__ import annotations

import multiprocessing
import pickle
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any, Literal

from compactsim.agents.collect.ray_local import local_ray
from compactsim.agents.collect.rollouts import CollectedRollout, Servers, run_rollout
from compactsim.agents.rollout.loop import RetryPolicy
from compactsim.agents.rollout.script import RolloutSpec
from compactsim.harness.core.errors import ConfigError
from compactsim.harness.core.gc_passes import fewer_gc_passes


def _run_many(
    servers: Servers, items: Sequence[tuple[int, RolloutSpec]], retry: RetryPolicy, threads: int
) -> list[CollectedRollout]:
    with servers.open() as (model, reward):
        if threads <= 1:
            return [run_rollout(s, model_client=model, reward_client=reward, retry=retry, index=i) for i, s in items]
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="rollout") as pool:
            futures = [pool.submit(run_rollout, s, model_client=model, reward_client=reward, retry=retry, index=i)
                       for i, s in items]
            return [f.result() for f in futures]


def _shares(specs: Sequence[RolloutSpec], workers: int) -> list[list[tuple[int, dict[str, Any]]]]:
    """Rollouts dealt round-robin to `workers` (as JSON-ready dicts: cheap to pickle, validated again there)."""
    items = [(i, s.model_dump(mode="json")) for i, s in enumerate(specs)]
    return [share for share in (items[k::workers] for k in range(workers)) if share]


def _run_share(servers: Servers, retry: RetryPolicy, items: list[tuple[int, dict[str, Any]]]) -> list[CollectedRollout]:
    """A worker's share, in order, on servers it opens itself (no `collect` around it in a worker process or actor)."""
    with fewer_gc_passes():
        return _run_many(servers, [(i, RolloutSpec.model_validate(s)) for i, s in items], retry, 1)


def _run_share_in_worker(servers: Servers, retry: RetryPolicy,
                         items: list[tuple[int, dict[str, Any]]]) -> list[CollectedRollout]:
    """`_run_share` in a worker process: an error that would not survive the trip back is re-raised typed.

    An exception whose constructor does not match its pickled arguments fails to unpickle in the
    parent, which then reports a dead worker instead of the error.
    """
    try:
        return _run_share(servers, retry, items)
    except Exception as exc:
        try:
            pickle.loads(pickle.dumps(exc))
        except Exception:
            raise ConfigError("worker_failed", f"a rollout worker failed: {type(exc).__name__}: {exc}") from None
        raise


def _pin_torch_threads() -> None:
    """Each worker pins torch to one thread, as the main process does: policy-mode sampling is exact."""
    from compactsim.harness.core.policy import configure_determinism

    configure_determinism()


@dataclass(frozen=True)
class LocalExecutor:
    """Threads in this process sharing one client per server (the default)."""

    workers: int = 4

    def map(self, servers: Servers, specs: Sequence[RolloutSpec], *, retry: RetryPolicy) -> list[CollectedRollout]:
        if self.workers < 1:
            raise ValueError(f"workers={self.workers}: expected >= 1")
        return _run_many(servers, list(enumerate(specs)), retry, self.workers)


@dataclass
class ProcessExecutor:
    """Spawned worker processes (not forked: torch and the servers' threads do not survive a fork).

    ``with ProcessExecutor(2) as ex:`` keeps the processes for every `map` inside the block. A
    worker that dies (killed, out of memory) is a `ConfigError` (``worker_failed``), not a hang.
    """

    workers: int = 2
    _pool: ProcessPoolExecutor | None = field(default=None, init=False, repr=False, compare=False)
    _kept: bool = field(default=False, init=False, repr=False, compare=False)

    def __enter__(self) -> ProcessExecutor:
        self._kept = True
        return self

    def __exit__(self, *exc: object) -> None:
        self._kept = False
        self.close()

    def close(self) -> None:
        """Stop the worker processes (the next `map` starts new ones)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def map(self, servers: Servers, specs: Sequence[RolloutSpec], *, retry: RetryPolicy) -> list[CollectedRollout]:
        if self.workers < 1:
            raise ValueError(f"workers={self.workers}: expected >= 1")
        if self.workers == 1 or len(specs) <= 1:  # nothing to share out: no process start-up to pay
            return _run_many(servers, list(enumerate(specs)), retry, 1)
        if self._pool is None:
            try:
                self._pool = ProcessPoolExecutor(max_workers=self.workers, initializer=_pin_torch_threads,
                                                 mp_context=multiprocessing.get_context("spawn"))
            except (OSError, NotImplementedError, ImportError):  # no semaphores here (e.g. no /dev/shm)
                return _run_many(servers, list(enumerate(specs)), retry, 1)  # the same results, in this process
        try:
            futures = [self._pool.submit(_run_share_in_worker, servers, retry, share)
                       for share in _shares(specs, self.workers)]
            results = [r for f in futures for r in f.result()]
        except BrokenProcessPool:
            self.close()
            raise ConfigError("worker_failed", "a rollout worker process died (killed, out of memory, or a crash in "
                                               "native code); rerun with the local executor to see why") from None
        finally:
            if not self._kept:
                self.close()
        return sorted(results, key=lambda r: r.index)


class _RayWorker:
    """A Ray actor body: opens its own clients and runs its share of the rollouts in order."""

    def __init__(self, servers: Servers, retry: RetryPolicy) -> None:
        self.servers = servers
        self.retry = retry

    def run(self, items: list[tuple[int, dict[str, Any]]]) -> list[CollectedRollout]:
        return _run_share(self.servers, self.retry, items)


@dataclass(frozen=True)
class RayExecutor:
    """Ray actors on a local, loopback-only Ray instance (dashboard off, auth disabled)."""

    workers: int = 2

    def map(self, servers: Servers, specs: Sequence[RolloutSpec], *, retry: RetryPolicy) -> list[CollectedRollout]:
        if self.workers < 1:
            raise ValueError(f"workers={self.workers}: expected >= 1")
        with ray_session(self.workers):
            import ray

            actor = ray.remote(num_cpus=0)(_RayWorker)
            actors = [actor.remote(servers, retry) for _ in range(self.workers)]
            refs = [a.run.remote(share) for a, share in zip(actors, _shares(specs, self.workers))]
            results = [r for batch in ray.get(refs) for r in batch]
        return sorted(results, key=lambda r: r.index)


def ray_session(num_cpus: int):  # -> ContextManager[None]
    """Ray on 127.0.0.1 for collection (see `compactsim.agents.collect.ray_local.local_ray`)."""
    return local_ray(num_cpus)


Executor = LocalExecutor | ProcessExecutor | RayExecutor
EXECUTOR_KINDS = ("local", "processes", "ray")


def make_executor(kind: Literal["local", "processes", "ray"], workers: int) -> Executor:
    """An executor by name."""
    if kind == "local":
        return LocalExecutor(workers)
    if kind == "processes":
        return ProcessExecutor(workers)
    if kind == "ray":
        return RayExecutor(workers)
    raise ValueError(f"executor={kind!r}: expected one of {', '.join(EXECUTOR_KINDS)}")


def collect(
    specs: Sequence[RolloutSpec],
    servers: Servers,
    *,
    executor: Executor | None = None,
    retry: RetryPolicy = RetryPolicy(),
) -> list[CollectedRollout]:
    """Run every spec; results in input order, identical for every executor and worker count."""
    ids = [s.rollout_id for s in specs]
    if len(set(ids)) != len(ids):
        raise ValueError("rollout ids must be unique within one collection")
    with fewer_gc_passes():  # also while worker results are unpickled here
        return (executor or LocalExecutor()).map(servers, specs, retry=retry)


__all__ = [
    "EXECUTOR_KINDS",
    "Executor",
    "LocalExecutor",
    "ProcessExecutor",
    "RayExecutor",
    "collect",
    "make_executor",
    "ray_session",
]
