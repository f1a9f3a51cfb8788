"""Open the mock model and reward servers for a whole run: in-process (ASGI) or on a 127.0.0.1 port.

Both ways, the clients carry the same read timeout (`client_timeout_s`) and enforce it, so a
`timeout` fault ends in the same retried or failed attempt in process and over HTTP.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from compactsim.harness.core.errors import ConfigError

HOST = "127.0.0.1"
ServerMode = Literal["inprocess", "http"]
#: Timeout of compactsim's own clients (a policy-mode call on a busy CPU is slow). Shorter than the
#: longest `timeout` fault delay a scenario may declare (60 s), so such a fault always fires.
HTTP_TIMEOUT_S = 30.0
#: A declared `timeout` fault with delay d makes the clients' timeout ``d * TIMEOUT_FAULT_SHARE``
#: (when that is shorter): the fault fires whatever its delay, and a test can keep it small.
TIMEOUT_FAULT_SHARE = 0.5


def client_timeout_s(model_settings: Mapping[str, Any] | None = None) -> float:
    """The read timeout compactsim's clients use against a model server with these settings.

    `HTTP_TIMEOUT_S`, or half the shortest delay of a declared `timeout` fault when that is
    shorter, so every `timeout` fault trips the client and its retry path runs. Pick a delay at
    least twice as long as the slowest ordinary call of the scenario (scripted calls take
    milliseconds; policy-mode calls can take seconds on a busy CPU).
    """
    delays = [_fault_delay(f) for f in (model_settings or {}).get("faults") or () if _kind(f) == "timeout"]
    return min([HTTP_TIMEOUT_S, *(d * TIMEOUT_FAULT_SHARE for d in delays if d > 0)])


def _kind(fault: Any) -> Any:
    return fault.get("kind") if isinstance(fault, Mapping) else getattr(fault, "kind", None)


def _fault_delay(fault: Any) -> float:
    from compactsim.mock_servers.model_server.settings import FaultSpec

    return (fault if isinstance(fault, FaultSpec) else FaultSpec.model_validate(dict(fault))).delay()


class DeadlineApp:
    """Wrap an ASGI app so an in-process client gets `httpx.ReadTimeout` as a real socket client would.

    An in-process transport ignores httpx timeouts; without this a `timeout` fault would just stall
    an in-process run. The deadline covers the whole request (the answer comes in one piece in
    process); the message is httpx's own ("timed out"), so what the agents record about the
    attempt is the same in process and over HTTP.
    """

    def __init__(self, app: Any, timeout_s: float) -> None:
        self.app = app
        self.timeout_s = timeout_s

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        import anyio
        import httpx

        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            with anyio.fail_after(self.timeout_s):
                await self.app(scope, receive, send)
        except TimeoutError:
            raise httpx.ReadTimeout("timed out") from None


def inprocess_client(app: Any, *, base_url: str, timeout_s: float) -> Any:
    """An `httpx.Client` served by `app` in process (`InProcessTransport`) that enforces `timeout_s`."""
    import httpx

    from compactsim.mock_servers.inprocess import InProcessTransport

    return httpx.Client(transport=InProcessTransport(DeadlineApp(app, timeout_s)), base_url=base_url,
                        timeout=httpx.Timeout(timeout_s))


@dataclass(frozen=True)
class OpenServers:
    """One open client per server, reused for the whole run (`compactsim.agents.collect`'s `Servers`)."""

    model: Any
    reward: Any

    @contextmanager
    def open(self) -> Iterator[tuple[Any, Any]]:
        yield self.model, self.reward


@contextmanager
def serve_on_loopback(app: Any) -> Iterator[str]:
    """Serve `app` with uvicorn on 127.0.0.1 (a free port) in a thread; yields its base URL."""
    import uvicorn

    from compactsim.mock_servers.head_deadline import uvicorn_config

    server = uvicorn.Server(uvicorn_config(app, host=HOST, port=0))
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
    from compactsim.harness.core.http_deadline import deadline_client
    from compactsim.mock_servers.model_server import ServerSettings, create_app
    from compactsim.mock_servers.reward_server import RewardSettings
    from compactsim.mock_servers.reward_server import create_app as create_reward_app

    model_app = create_app(ServerSettings.model_validate(dict(model_settings)))
    reward_app = create_reward_app(RewardSettings.model_validate(dict(reward_settings)))
    seconds = client_timeout_s(model_settings)
    with ExitStack() as stack:
        if mode == "http":
            model = stack.enter_context(deadline_client(seconds, base_url=stack.enter_context(serve_on_loopback(model_app))))
            reward = stack.enter_context(deadline_client(seconds, base_url=stack.enter_context(serve_on_loopback(reward_app))))
        else:
            model = stack.enter_context(inprocess_client(model_app, base_url="http://model", timeout_s=seconds))
            reward = stack.enter_context(inprocess_client(reward_app, base_url="http://reward", timeout_s=seconds))
        yield OpenServers(model, reward)


__all__ = [
    "HOST",
    "HTTP_TIMEOUT_S",
    "TIMEOUT_FAULT_SHARE",
    "DeadlineApp",
    "OpenServers",
    "ServerMode",
    "client_timeout_s",
    "inprocess_client",
    "open_mock_servers",
    "serve_on_loopback",
]
