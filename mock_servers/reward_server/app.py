"""Assemble the mock reward server: `create_app(settings)` -> FastAPI app (serve it on 127.0.0.1 only)."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from mock_servers.reward_server.routes import verify
from mock_servers.reward_server.settings import RewardSettings


class _BodyLimit:
    """413 for a declared body over the cap, before the route parses it."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int) -> None:
        self.app = app
        self.cap = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for name, value in scope.get("headers", []):
                if name == b"content-length" and value.isdigit() and int(value) > self.cap:
                    response = JSONResponse({"detail": f"request body is {int(value)} bytes; the limit is {self.cap}"},
                                            status_code=413)
                    await response(scope, receive, send)
                    return
        await self.app(scope, receive, send)


def create_app(settings: RewardSettings | None = None) -> FastAPI:
    """A fresh reward app; its settings live on `app.state.settings`."""
    settings = settings or RewardSettings()
    app = FastAPI(title="compactsim mock reward server", version="1", docs_url=None, redoc_url=None)
    app.state.settings = settings
    app.include_router(verify.router)
    app.add_middleware(_BodyLimit, max_body_bytes=settings.max_body_bytes)
    return app


__all__ = ["create_app"]
