"""Fixtures for the agent tests: the §8 reference rollout, a perfect in-process model, the mock server."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from compactsim.agents.rollout.record import RolloutRecord
from compactsim.agents.rollout.script import RolloutSpec
from compactsim.agents.rollout.session import CompactionSession
from tests.unit.agents.agent_helpers import drive_session, make_spec, model_answer, reference_record as _reference


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("filterwarnings", "ignore:Using `httpx` with `starlette.testclient`")


@pytest.fixture
def reference_record(example_transport: dict[str, Any]) -> RolloutRecord:
    """The §8 rollout replayed item for item through `CompactionSession` (no HTTP)."""
    return _reference(example_transport)


@pytest.fixture
def drive() -> Callable[..., CompactionSession]:
    """`drive(history, script)` → the finished `CompactionSession` (see `drive_session`)."""
    return drive_session


@pytest.fixture
def answer() -> Callable[..., list[dict[str, Any]]]:
    """`answer(items, step, turn=)` → the output items a perfect scripted model returns."""
    return model_answer


@pytest.fixture
def spec_for() -> Callable[..., RolloutSpec]:
    """`spec_for(preset, turns=, flavour=, seed=, ...)` → a `RolloutSpec` (see `make_spec`)."""
    return make_spec


@pytest.fixture
def mock_model() -> Iterator[Callable[..., Any]]:
    """`mock_model(specs, **settings)` → an in-process TestClient serving the specs' scripts."""
    from fastapi.testclient import TestClient

    from compactsim.agents.collect import server_script
    from compactsim.mock_servers.model_server import ServerSettings, create_app

    def open_client(specs: Sequence[RolloutSpec], **settings: Any) -> TestClient:
        data = {"seed": specs[0].seed if specs else 0, "script": server_script(specs), **settings}
        return TestClient(create_app(ServerSettings.model_validate(data)))

    yield open_client


@pytest.fixture
def run_agent(mock_model) -> Callable[..., RolloutRecord]:
    """`run_agent(spec, retry=None, **server_settings)` → the record of one rollout against the mock server."""
    from compactsim.agents.rollout.loop import RetryPolicy, ScriptedAgent

    def run(spec: RolloutSpec, *, retry: RetryPolicy | None = None, **settings: Any) -> RolloutRecord:
        with mock_model([spec], **settings) as client:
            return ScriptedAgent(client, retry=retry or RetryPolicy()).run(spec)

    return run
