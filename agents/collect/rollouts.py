"""Collect many rollouts: agent loop + reward + emitted evidence + ground truth, on threads or Ray actors.

Each rollout is independent and the servers answer as pure functions of the request, so the
results (evidence and ground-truth bytes) are identical for every executor and worker count;
they are returned in input order. Servers are described by picklable `Servers` values so a Ray
actor can open its own clients: `HttpServers` (real ports on 127.0.0.1) or `InProcessServers`
(FastAPI apps built inside the worker and served through `TestClient`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

import httpx

from compactsim.agents.collect.ray_local import local_ray
from compactsim.agents.evidence import emit_response, emit_result, responses_create_params
from compactsim.agents.rollout.ground_truth import ground_truth_log
from compactsim.agents.rollout.gym_response import IdMint, derived_id
from compactsim.agents.rollout.loop import CallFailed, RetryPolicy, ScriptedAgent, post_json
from compactsim.agents.rollout.record import RolloutFailure, RolloutRecord
from compactsim.agents.rollout.script import RolloutSpec
from compactsim.harness.core.digests import canonical_digest


@dataclass(frozen=True, slots=True)
class Timings:
    """Wall-clock split of one rollout (never part of an artifact)."""

    server_s: float = 0.0
    agent_s: float = 0.0
    emitter_s: float = 0.0


@dataclass(frozen=True, slots=True)
class CollectedRollout:
    """One finished rollout: its `/run` result (None when it failed) and its ground-truth log."""

    index: int
    rollout_id: str
    status: Literal["completed", "failed"]
    result: dict[str, Any] | None
    ground_truth: dict[str, Any]
    timings: Timings = field(default=Timings(), compare=False)

    @property
    def failure(self) -> dict[str, Any] | None:
        return self.ground_truth["outcome"]["failure"]

    def artifact_digest(self) -> str:
        """Digest of everything the rollout produced (result and ground truth)."""
        return canonical_digest({"result": self.result, "ground_truth": self.ground_truth})


class _TimedClient:
    """Forwards `post` to a shared client and adds its wall time to this rollout's server share."""

    def __init__(self, client: httpx.Client) -> None:
        self._client = client
        self.timeout = getattr(client, "timeout", None)
        self.seconds = 0.0

    def post(self, *args: Any, **kwargs: Any) -> httpx.Response:
        start = time.perf_counter()
        try:
            return self._client.post(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start


def verify_reward(record: RolloutRecord, reward_client: httpx.Client, *, retry: RetryPolicy) -> tuple[float, bool]:
    """POST the full (schema 2) response to the reward server's `/verify`, as Gym's `/run` does."""
    flavour = "none" if record.spec.flavour == "none" else "gym-0.7.0-full"
    body = {
        "responses_create_params": responses_create_params(record),
        "response": emit_response(record, flavour, include_lineage=False),
        "rollout_id": record.rollout_id,
        "rollout_index": record.spec.rollout_index,
    }
    data, _, _ = post_json(reward_client, "/verify", body, retry=retry,
                           validate=lambda d: None if isinstance(d, dict) and "reward" in d else "no 'reward' field")
    instance = data.get("instance_config") or {}
    return float(data["reward"]), bool(instance.get("mask_sample", False))


def run_rollout(
    spec: RolloutSpec,
    *,
    model_client: httpx.Client,
    reward_client: httpx.Client | None = None,
    retry: RetryPolicy = RetryPolicy(),
    index: int = 0,
    mint: IdMint = derived_id,
) -> CollectedRollout:
    """One rollout end to end: agent loop, reward, evidence in the spec's flavour, ground truth.

    `mint` makes the chat route's item ids (a live check replays the ones Gym minted).
    """
    start = time.perf_counter()
    model = _TimedClient(model_client)
    record = ScriptedAgent(model, retry=retry, mint=mint).run(spec)  # type: ignore[arg-type]
    server_s = model.seconds
    reward: float | None = None
    masked = False
    if record.failure is None and reward_client is not None:
        rewards = _TimedClient(reward_client)
        try:
            reward, masked = verify_reward(record, rewards, retry=retry)  # type: ignore[arg-type]
        except CallFailed as exc:
            record = _with_failure(record, RolloutFailure(exc.kind, len(record.calls), len(exc.attempts),
                                                          f"verify: {exc.detail}", exc.attempts))
        server_s += rewards.seconds
    emit_start = time.perf_counter()
    result = emit_result(record, reward=reward, mask_sample=masked) if record.failure is None else None
    truth = ground_truth_log(record, reward=reward, mask_sample=masked)
    end = time.perf_counter()
    timings = Timings(server_s=server_s, agent_s=max(emit_start - start - server_s, 0.0), emitter_s=end - emit_start)
    return CollectedRollout(index, spec.rollout_id, "completed" if result is not None else "failed", result, truth, timings)


def _with_failure(record: RolloutRecord, failure: RolloutFailure) -> RolloutRecord:
    return replace(record, failure=failure)


# ---------------------------------------------------------------------------------------------- servers


class Servers(Protocol):
    """Where the model (and reward) servers are; `open()` yields clients, one of each per worker."""

    def open(self) -> Any: ...


@dataclass(frozen=True)
class HttpServers:
    """Servers already listening on loopback ports."""

    model_url: str
    reward_url: str | None = None
    timeout_s: float = 30.0

    @contextmanager
    def open(self) -> Iterator[tuple[httpx.Client, httpx.Client | None]]:
        timeout = httpx.Timeout(self.timeout_s)
        with ExitStack() as stack:
            model = stack.enter_context(httpx.Client(base_url=self.model_url, timeout=timeout))
            reward = (stack.enter_context(httpx.Client(base_url=self.reward_url, timeout=timeout))
                      if self.reward_url else None)
            yield model, reward


@dataclass(frozen=True)
class InProcessServers:
    """Mock servers built from plain settings inside the worker and served in-process (no port)."""

    model_settings: Mapping[str, Any]
    reward_settings: Mapping[str, Any] | None = None

    @contextmanager
    def open(self) -> Iterator[tuple[httpx.Client, httpx.Client | None]]:
        from compactsim.mock_servers.model_server import ServerSettings
        from compactsim.mock_servers.model_server import create_app as model_app
        from compactsim.mock_servers.reward_server import RewardSettings
        from compactsim.mock_servers.reward_server import create_app as reward_app
        from compactsim.mock_servers.serving import client_timeout_s, inprocess_client

        # the in-process clients enforce the same read timeout as HTTP ones (a `timeout` fault fires)
        seconds = client_timeout_s(self.model_settings)
        with ExitStack() as stack:
            model = stack.enter_context(inprocess_client(model_app(ServerSettings.model_validate(dict(self.model_settings))),
                                                         base_url="http://testserver", timeout_s=seconds))
            reward = None
            if self.reward_settings is not None:
                app = reward_app(RewardSettings.model_validate(dict(self.reward_settings)))
                reward = stack.enter_context(inprocess_client(app, base_url="http://testserver", timeout_s=seconds))
            yield model, reward


def server_script(specs: Sequence[RolloutSpec]) -> dict[str, list[dict[str, Any]]]:
    """The model server's `script` table for `specs` (one entry per rollout id)."""
    table: dict[str, list[dict[str, Any]]] = {}
    for spec in specs:
        if spec.rollout_id in table:
            raise ValueError(f"duplicate rollout_id {spec.rollout_id!r} in the batch")
        table[spec.rollout_id] = spec.script.server_steps()
    return table


# ---------------------------------------------------------------------------------------------- executors


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


@dataclass(frozen=True)
class LocalExecutor:
    """Threads in this process sharing one client per server (the default)."""

    workers: int = 4

    def map(self, servers: Servers, specs: Sequence[RolloutSpec], *, retry: RetryPolicy) -> list[CollectedRollout]:
        if self.workers < 1:
            raise ValueError(f"workers={self.workers}: expected >= 1")
        return _run_many(servers, list(enumerate(specs)), retry, self.workers)


class _RayWorker:
    """A Ray actor body: opens its own clients and runs its share of the rollouts in order."""

    def __init__(self, servers: Servers, retry: RetryPolicy) -> None:
        self.servers = servers
        self.retry = retry

    def run(self, items: list[tuple[int, dict[str, Any]]]) -> list[CollectedRollout]:
        specs = [(i, RolloutSpec.model_validate(s)) for i, s in items]
        return _run_many(self.servers, specs, self.retry, 1)


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
            items = [(i, s.model_dump(mode="json")) for i, s in enumerate(specs)]
            shares = [items[k:: self.workers] for k in range(self.workers)]
            refs = [a.run.remote(share) for a, share in zip(actors, shares) if share]
            results = [r for batch in ray.get(refs) for r in batch]
        return sorted(results, key=lambda r: r.index)


def ray_session(num_cpus: int):  # -> ContextManager[None]
    """Ray on 127.0.0.1 for collection (see `compactsim.agents.collect.ray_local.local_ray`)."""
    return local_ray(num_cpus)


Executor = LocalExecutor | RayExecutor


def make_executor(kind: Literal["local", "ray"], workers: int) -> Executor:
    """An executor by name."""
    if kind == "local":
        return LocalExecutor(workers)
    if kind == "ray":
        return RayExecutor(workers)
    raise ValueError(f"executor={kind!r}: expected 'local' or 'ray'")


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
    return (executor or LocalExecutor()).map(servers, specs, retry=retry)


__all__ = [
    "CollectedRollout",
    "Executor",
    "HttpServers",
    "InProcessServers",
    "LocalExecutor",
    "RayExecutor",
    "Servers",
    "Timings",
    "collect",
    "make_executor",
    "ray_session",
    "run_rollout",
    "server_script",
    "verify_reward",
]
