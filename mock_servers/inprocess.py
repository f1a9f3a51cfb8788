"""A synchronous httpx transport that serves an ASGI app on its own event loop, one thread hop per request.

Starlette's `TestClient` crosses threads through an anyio portal for every ASGI message (request
body, response start, each body chunk): about eight blocking hops per request, each a self-pipe
write and a wake-up that fight the GIL. Collection spent most of its server share there. This
transport hands the whole request to a private loop in a daemon thread at once
(`httpx.ASGITransport` inside it), reads the body there and returns a finished response: one hop.
The handlers run inline on that loop (`OFFLOAD_HANDLERS` off): it serves this client alone; the
body is complete in memory before the app runs, so no body deadline applies (`BODY_IN_MEMORY`).

Exceptions raised by the app (an `httpx.ReadTimeout` from `DeadlineApp` included) propagate to
the caller as they do with `TestClient`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from compactsim.mock_servers.limits import BODY_IN_MEMORY, OFFLOAD_HANDLERS
from compactsim.mock_servers.loop_thread import LoopThread


def _dropped_as_protocol_error(app: Any) -> Any:
    """`app`, where an answer it leaves incomplete (a `drop_connection` fault) reaches the client as the error an HTTP
    client gets when the server closes the connection mid-body, not as httpx's in-process `AssertionError`."""

    async def complete_or_dropped(scope: Any, receive: Any, send: Any) -> None:
        finished = False

        async def tracking(message: Any) -> None:
            nonlocal finished
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                finished = True
            await send(message)

        await app(scope, receive, tracking)
        if scope["type"] == "http" and not finished:
            raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")

    return complete_or_dropped


class InProcessTransport(httpx.BaseTransport):
    """Runs `app` for each request on a private event loop thread (started lazily, stopped on close)."""

    def __init__(self, app: Any) -> None:
        self._asgi = httpx.ASGITransport(app=_dropped_as_protocol_error(app))
        self._loop = LoopThread("compactsim-inprocess")
        self._closed = False

    async def _handle(self, request: httpx.Request) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        OFFLOAD_HANDLERS.set(False)  # this task's context only: handlers run inline on this loop
        BODY_IN_MEMORY.set(True)  # `request.read()` ran before this hop: no client can stall the body
        response = await self._asgi.handle_async_request(request)
        # the bytes as sent (still encoded): the client decodes `content-encoding` itself
        body = b"".join([chunk async for chunk in response.stream])  # type: ignore[union-attr]
        return response.status_code, list(response.headers.raw), body

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self._closed:
            raise RuntimeError("the in-process transport is closed")
        request.read()  # the body in memory: the loop thread must not pull from a sync stream
        future = asyncio.run_coroutine_threadsafe(self._handle(request), self._loop.loop())
        status, headers, body = future.result()
        return httpx.Response(status, headers=headers, content=body, request=request)

    def close(self) -> None:
        self._closed = True
        self._loop.stop()


__all__ = ["InProcessTransport"]
