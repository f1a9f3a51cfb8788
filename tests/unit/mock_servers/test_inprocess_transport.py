"""The in-process transport: one hop per request, bodies as sent, app errors propagate, closed means closed."""

from __future__ import annotations

import threading

import httpx
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from compactsim.mock_servers.inprocess import InProcessTransport
from compactsim.mock_servers.limits import OFFLOAD_HANDLERS


async def _echo(request: Request) -> JSONResponse:
    return JSONResponse({"got": await request.json(), "offload": OFFLOAD_HANDLERS.get()})


async def _big(_request: Request) -> PlainTextResponse:
    return PlainTextResponse("x" * 5000)


async def _boom(_request: Request) -> PlainTextResponse:
    raise KeyError("server bug")


APP = Starlette(routes=[Route("/echo", _echo, methods=["POST"]), Route("/big", _big), Route("/boom", _boom)],
                middleware=[Middleware(GZipMiddleware, minimum_size=100)])


def test_requests_are_served_inline_and_compressed_bodies_decode_once() -> None:
    with httpx.Client(transport=InProcessTransport(APP), base_url="http://t") as client:
        assert client.post("/echo", json={"a": [1, 2]}).json() == {"got": {"a": [1, 2]}, "offload": False}
        big = client.get("/big", headers={"accept-encoding": "gzip"})
        assert (big.headers["content-encoding"], big.text) == ("gzip", "x" * 5000)
    assert OFFLOAD_HANDLERS.get() is True  # the caller's context is untouched


def test_an_app_exception_reaches_the_caller() -> None:
    with httpx.Client(transport=InProcessTransport(APP), base_url="http://t") as client, pytest.raises(KeyError):
        client.get("/boom")


def test_closing_stops_the_loop_thread_and_refuses_requests() -> None:
    transport = InProcessTransport(APP)
    with httpx.Client(transport=transport, base_url="http://t") as client:
        client.post("/echo", json={})
        names = {t.name for t in threading.enumerate()}
        assert "compactsim-inprocess" in names
    with pytest.raises(RuntimeError, match="closed"):
        transport.handle_request(httpx.Request("GET", "http://t/big"))
