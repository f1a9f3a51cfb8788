"""The live check's loopback clients: the wire recorder, the mocked resources server, the waits, the collector.

Each holds one HTTP client for its whole life (the ground rule: reuse one client). The two
helper apps open theirs in uvicorn's lifespan when `ThreadServer` starts them, close it when it
stops, and follow `reset` from one scenario to the next without a new client; `wait_http` polls
through one client, and `GymCollector` reads weight versions and posts `/run` through one.
"""

from __future__ import annotations

from unittest import mock

import httpx
import pytest

from compactsim.harness.gym_check.gym_stack import ThreadServer
from compactsim.harness.gym_check.wire import MockResources, WireRecorder
from compactsim.mock_servers.model_server import ServerSettings, create_app
from compactsim.mock_servers.serving import serve_on_loopback
from tests.unit.mock_servers.model_server.server_builders import SCRIPT, chat_body, meta

pytestmark = pytest.mark.timeout(60)


def _counting(client_class: type) -> type:
    """A subclass of an httpx client class that keeps every instance made, to count them and see which are closed."""

    class Counting(client_class):  # type: ignore[misc, valid-type]
        instances: list = []

        def __init__(self, *args, **kwargs) -> None:
            type(self).instances.append(self)
            super().__init__(*args, **kwargs)

        @classmethod
        def counts(cls) -> tuple[int, int]:
            """(clients made, clients closed)."""
            return len(cls.instances), sum(c.is_closed for c in cls.instances)

    return Counting


@pytest.fixture
def counting_client():
    counting = _counting(httpx.AsyncClient)
    with mock.patch("compactsim.harness.gym_check.wire.httpx.AsyncClient", counting):
        yield counting


def test_the_recorder_forwards_through_one_client_and_logs_every_exchange(counting_client):
    recorder = WireRecorder()
    with serve_on_loopback(create_app(ServerSettings(seed=7, script=SCRIPT))) as first, \
            serve_on_loopback(create_app(ServerSettings(seed=8, script=SCRIPT))) as second:
        with ThreadServer(recorder.app(), name="wire-recorder") as proxy:
            recorder.reset(first)
            a = httpx.post(proxy.url + "/v1/chat/completions", json=chat_body(metadata=meta("r1", 1)))
            b = httpx.post(proxy.url + "/v1/chat/completions", json=chat_body(metadata=meta("r1", 2)))
            seen_first = recorder.exchanges()
            recorder.reset(second)  # the next scenario's server: same client, a fresh log
            c = httpx.post(proxy.url + "/v1/chat/completions", json=chat_body(metadata=meta("r2", 1)))
            seen_second = recorder.exchanges()
            assert counting_client.counts() == (1, 0)
    assert counting_client.counts() == (1, 1)
    assert [r.status_code for r in (a, b, c)] == [200, 200, 200]
    assert [(e["seq"], e["path"], e["status"], e["response"]) for e in seen_first] == [
        (0, "/v1/chat/completions", 200, a.json()), (1, "/v1/chat/completions", 200, b.json())]
    assert [(e["seq"], e["request"]["metadata"], e["response"]) for e in seen_second] == [
        (0, meta("r2", 1), c.json())]


def test_the_resources_server_verifies_through_one_client_across_scenarios(counting_client):
    resources = MockResources()
    body = {"responses_create_params": {"metadata": {}}, "response": {}}
    with ThreadServer(resources.app(), name="mock-resources") as server:
        resources.reset({}, {})
        default = httpx.post(server.url + "/verify", json=body)
        resources.reset({}, {"rule": {"kind": "fixed", "value": 0.25}})  # the next scenario's reward app
        changed = httpx.post(server.url + "/verify", json=body)
        assert counting_client.counts() == (1, 0)
    assert counting_client.counts() == (1, 1)
    assert (default.status_code, changed.status_code) == (200, 200)
    assert (default.json()["reward"], changed.json()["reward"]) == (1.0, 0.25)


@pytest.fixture
def counting_sync_client():
    counting = _counting(httpx.Client)  # the checker's synchronous side
    with mock.patch("compactsim.harness.gym_check.gym_stack.httpx.Client", counting), \
            mock.patch("compactsim.harness.gym_check.live_gym.httpx.Client", counting):
        yield counting


def test_waiting_for_a_server_polls_through_one_client(counting_sync_client):
    """The server comes up after several refused polls; every poll, and the deadline's, shares one client."""
    import threading

    from compactsim.harness.gym_check.errors import GymSetupError
    from compactsim.harness.gym_check.gym_stack import wait_http

    app = create_app(ServerSettings(seed=7, script=SCRIPT))
    server = ThreadServer(app, name="late")
    starter = threading.Timer(0.3, server.__enter__)
    starter.start()
    try:
        wait_http(server.url + "/health", None, None, timeout_s=20)
        assert counting_sync_client.counts() == (1, 1)
    finally:
        starter.join()
        server.__exit__(None, None, None)
    with pytest.raises(GymSetupError, match="did not answer within"):
        wait_http(server.url + "/health", None, None, timeout_s=0.3)  # stopped: refused until the deadline
    assert counting_sync_client.counts() == (2, 2)


def test_the_gym_collector_reads_weight_versions_through_its_one_client(counting_sync_client):
    from compactsim.harness.gym_check.live_gym import GymCollector

    recorder = WireRecorder()
    with serve_on_loopback(create_app(ServerSettings(seed=7, script=SCRIPT))) as upstream:
        recorder.reset(upstream)
        with GymCollector("http://127.0.0.1:9", recorder) as collector:
            assert collector.synced_version() == collector.synced_version() == 0
            assert counting_sync_client.counts() == (1, 0)
    assert counting_sync_client.counts() == (1, 1)
