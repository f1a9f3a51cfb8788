"""One rollout end to end (agent loop + reward + emitted evidence + ground truth), and where its servers are.

Each rollout is independent and the servers answer as pure functions of the request, so the
results (evidence and ground-truth bytes) are identical for every executor and worker count
(`executors`). Servers are described by picklable `Servers` values so a worker process or Ray
actor can open its own clients: `HttpServers` (real ports on 127.0.0.1) or `InProcessServers`
(FastAPI apps built inside the worker and served in process, no port).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

import httpx

from compactsim.agents.evidence import emit_response, emit_result, responses_create_params
from compactsim.agents.rollout.ground_truth import ground_truth_log
from compactsim.agents.rollout.gym_response import IdMint, derived_id
from compactsim.agents.rollout.loop import CallFailed, RetryPolicy, ScriptedAgent, post_json
from compactsim.agents.rollout.response_checks import reward_problem
from compactsim.agents.rollout.record import RolloutFailure, RolloutRecord
from compactsim.agents.rollout.script import RolloutSpec
from compactsim.harness.core.digests import canonical_digest
from compactsim.harness.core.http_deadline import deadline_client


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
                           validate=reward_problem)
    instance = data.get("instance_config") or {}  # shapes checked by `reward_problem`
    return float(data["reward"]), bool(instance.get("mask_sample") or False)


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
        with ExitStack() as stack:
            model = stack.enter_context(deadline_client(self.timeout_s, base_url=self.model_url))
            reward = (stack.enter_context(deadline_client(self.timeout_s, base_url=self.reward_url))
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


__all__ = [
    "CollectedRollout",
    "HttpServers",
    "InProcessServers",
    "Servers",
    "Timings",
    "run_rollout",
    "server_script",
    "verify_reward",
]
