"""Assemble the mock model server: `create_app(settings)` -> FastAPI app (serve it on 127.0.0.1 only).

The HTTP boundary: a body over ``limits.max_body_bytes`` (``max_weights_bytes`` for `/weights`)
gets 413 before any route reads it, and one not complete within ``limits.body_timeout_s`` gets 408
(both logged like the routes' refusals: `model_server.limits.log_body_refusal`); the JSON routes check
the other request limits and run the request pipeline off the serving loop
(`compactsim.mock_servers.model_server.limits`); a server bug answers a JSON 500 and keeps the
connection (`compactsim.mock_servers.limits.ErrorGuardMiddleware`). Over HTTP the request line and
headers are due within the same ``body_timeout_s`` (`compactsim.mock_servers.head_deadline`).
"""

from __future__ import annotations

from fastapi import FastAPI

from compactsim.mock_servers.limits import BodyLimitMiddleware, ErrorGuardMiddleware
from compactsim.mock_servers.model_server.limits import log_body_refusal
from compactsim.mock_servers.model_server.routes import admin, chat, responses, tokenize
from compactsim.mock_servers.model_server.settings import ServerSettings
from compactsim.mock_servers.model_server.state import ServerState


def create_app(settings: ServerSettings | None = None) -> FastAPI:
    """A fresh app with its own engine, policy and request log (`app.state.server`)."""
    settings = settings or ServerSettings()
    app = FastAPI(title="compactsim mock model server", version="1", docs_url=None, redoc_url=None)
    state = app.state.server = ServerState(settings)
    for module in (chat, responses, tokenize, admin):
        app.include_router(module.router)
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=settings.limits.max_body_bytes,
                       path_caps={"/weights": ("max_weights_bytes", settings.limits.max_weights_bytes)},
                       body_timeout_s=settings.limits.body_timeout_s, on_refusal=log_body_refusal(state))
    app.add_middleware(ErrorGuardMiddleware)
    app.state.head_timeout_s = settings.limits.body_timeout_s  # served by uvicorn: `head_deadline.uvicorn_config`
    return app


__all__ = ["BodyLimitMiddleware", "create_app"]
