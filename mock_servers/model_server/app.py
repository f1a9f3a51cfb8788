"""Assemble the mock model server: `create_app(settings)` -> FastAPI app (serve it on 127.0.0.1 only)."""

from __future__ import annotations

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mock_servers.model_server.routes import admin, chat, responses, tokenize
from mock_servers.model_server.serialize import dumps
from mock_servers.model_server.settings import ServerSettings
from mock_servers.model_server.state import ServerState


class _TooLarge(Exception):
    pass


class BodyLimitMiddleware:
    """413 before the app sees a body over its cap (`/weights` has its own, larger cap)."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, max_weights_bytes: int) -> None:
        self.app = app
        self.max_body = max_body_bytes
        self.max_weights = max_weights_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        cap = self.max_weights if scope.get("path") == "/weights" else self.max_body
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    if int(value) > cap:
                        await self._reject(send, int(value), cap)
                        return
                except ValueError:
                    pass
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > cap:
                    raise _TooLarge(seen)
            return msg

        try:
            await self.app(scope, limited, send)
        except _TooLarge:
            await self._reject(send, seen, cap)

    @staticmethod
    async def _reject(send: Send, size: int, cap: int) -> None:
        body = dumps({"detail": f"request body is {size} bytes; the limit is {cap}"})
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


def create_app(settings: ServerSettings | None = None) -> FastAPI:
    """A fresh app with its own engine, policy and request log (`app.state.server`)."""
    settings = settings or ServerSettings()
    app = FastAPI(title="compactsim mock model server", version="1", docs_url=None, redoc_url=None)
    app.state.server = ServerState(settings)
    for module in (chat, responses, tokenize, admin):
        app.include_router(module.router)
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=settings.limits.max_body_bytes,
                       max_weights_bytes=settings.limits.max_weights_bytes)
    return app


__all__ = ["BodyLimitMiddleware", "create_app"]
