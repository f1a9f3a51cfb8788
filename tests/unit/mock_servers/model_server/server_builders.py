"""Builders for mock model server tests: script, bodies, in-process clients, a real loopback server."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import numpy as np
import uvicorn

from compactsim.harness.core.images import png_data_url
from compactsim.mock_servers.model_server import ScriptStep, ScriptToolCall, ServerSettings, create_app

IMAGE_URL = png_data_url((np.arange(6 * 5 * 3) * 7 % 256).astype(np.uint8).reshape(6, 5, 3))

SCRIPT = {
    "r1": (
        ScriptStep(reasoning="need a look", tool_calls=(ScriptToolCall(name="screenshot", arguments={}),)),
        ScriptStep(reasoning="click it", tool_calls=(ScriptToolCall(name="click", arguments={"x": 5}),)),
        ScriptStep(text="Settings is open."),
    ),
}


def meta(rollout: str, turn: int) -> dict[str, str]:
    return {"compactsim_rollout_id": rollout, "compactsim_turn": str(turn)}


def user_items(text: str = "open settings", image: bool = True) -> list[dict]:
    content: list[dict] = [{"type": "input_text", "text": text}]
    if image:
        content.append({"type": "input_image", "image_url": IMAGE_URL, "detail": "auto"})
    return [{"type": "message", "role": "user", "content": content}]


def chat_body(messages: list[dict] | None = None, **extra) -> dict:
    body = {"model": "m", "messages": messages or [{"role": "user", "content": "hi"}], "logprobs": True,
            "top_logprobs": 0, "return_tokens_as_token_ids": True, "return_token_ids": True}
    body.update(extra)
    return body


class SyncASGIClient:
    """`get`/`post` against an app in-process through `httpx.ASGITransport`, on a private event loop."""

    def __init__(self, app) -> None:
        self._loop = asyncio.new_event_loop()
        self._client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://model")

    def get(self, url: str, **kwargs) -> httpx.Response:
        return self._loop.run_until_complete(self._client.get(url, **kwargs))

    def post(self, url: str, **kwargs) -> httpx.Response:
        return self._loop.run_until_complete(self._client.post(url, **kwargs))

    def close(self) -> None:
        self._loop.run_until_complete(self._client.aclose())
        self._loop.close()


@contextmanager
def client_for(settings: ServerSettings) -> Iterator[SyncASGIClient]:
    """A synchronous client talking to a fresh app in-process (one client per test)."""
    client = SyncASGIClient(create_app(settings))
    try:
        yield client
    finally:
        client.close()


def run_async(coro):
    return asyncio.run(coro)


@contextmanager
def live_server(settings: ServerSettings) -> Iterator[str]:
    """A real uvicorn server on 127.0.0.1 (free port) for faults that need a socket."""
    config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=0, log_level="critical", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("mock model server did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


__all__ = ["IMAGE_URL", "SCRIPT", "SyncASGIClient", "chat_body", "client_for", "live_server", "meta", "run_async", "user_items"]
