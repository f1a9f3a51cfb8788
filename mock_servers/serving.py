"""Open the mock model and reward servers for a whole run: in-process (ASGI) or on a 127.0.0.1 port."""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from harness.core.errors import ConfigError

HOST = "127.0.0.1"
ServerMode = Literal["inprocess", "http"]
#: Read timeout of the clients of a real-port server (a policy-mode call on a busy CPU is slow).
HTTP_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class OpenServers:
    """One open client per server, reused for the whole run (`agents.collect`'s `Servers`)."""

    model: Any
    reward: Any

    @contextmanager
    def open(self) -> Iterator[tuple[Any, Any]]:
        yield self.model, self.reward


@contextmanager
def serve_on_loopback(app: Any) -> Iterator[str]:
    """Serve `app` with uvicorn on 127.0.0.1 (a free port) in a thread; yields its base URL."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host=HOST, port=0, log_level="warning", access_log=False, lifespan="off"))
    thread = threading.Thread(target=server.run, name="compactsim-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30.0
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise ConfigError("invalid_config", "the mock server did not start on 127.0.0.1 within 30 s")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{HOST}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30.0)


@contextmanager
def open_mock_servers(
    model_settings: Mapping[str, Any], reward_settings: Mapping[str, Any], mode: ServerMode = "inprocess"
) -> Iterator[OpenServers]:
    """The mock model and reward servers built from plain settings, with one client each."""
    import httpx

    with warnings.catch_warnings():  # starlette's note about httpx2 says nothing about this run
        warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
        from fastapi.testclient import TestClient

    from mock_servers.model_server import ServerSettings, create_app
    from mock_servers.reward_server import RewardSettings
    from mock_servers.reward_server import create_app as create_reward_app

    model_app = create_app(ServerSettings.model_validate(dict(model_settings)))
    reward_app = create_reward_app(RewardSettings.model_validate(dict(reward_settings)))
    with ExitStack() as stack:
        if mode == "http":
            timeout = httpx.Timeout(HTTP_TIMEOUT_S)
            model = stack.enter_context(httpx.Client(base_url=stack.enter_context(serve_on_loopback(model_app)), timeout=timeout))
            reward = stack.enter_context(httpx.Client(base_url=stack.enter_context(serve_on_loopback(reward_app)), timeout=timeout))
        else:
            model = stack.enter_context(TestClient(model_app, base_url="http://model"))
            reward = stack.enter_context(TestClient(reward_app, base_url="http://reward"))
        yield OpenServers(model, reward)


__all__ = ["HOST", "HTTP_TIMEOUT_S", "OpenServers", "ServerMode", "open_mock_servers", "serve_on_loopback"]
