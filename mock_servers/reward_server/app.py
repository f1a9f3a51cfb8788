"""Assemble the mock reward server: `create_app(settings)` -> FastAPI app (serve it on 127.0.0.1 only).

Same HTTP boundary as the model server (`compactsim.mock_servers.limits`): 413 for a body over
``max_body_bytes`` (declared or streamed), 408 for a body not complete within ``body_timeout_s``,
JSON caps checked off the serving loop by the route, and a server bug answers a JSON 500 without
closing the connection; over HTTP the request line and headers are due within ``body_timeout_s`` too.
"""

from __future__ import annotations

from fastapi import FastAPI

from compactsim.mock_servers.limits import BodyLimitMiddleware, ErrorGuardMiddleware
from compactsim.mock_servers.reward_server.routes import verify
from compactsim.mock_servers.reward_server.settings import RewardSettings


def create_app(settings: RewardSettings | None = None) -> FastAPI:
    """A fresh reward app; its settings live on `app.state.settings`."""
    settings = settings or RewardSettings()
    app = FastAPI(title="compactsim mock reward server", version="1", docs_url=None, redoc_url=None)
    app.state.settings = settings
    app.include_router(verify.router)
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=settings.max_body_bytes,
                       body_timeout_s=settings.body_timeout_s)
    app.add_middleware(ErrorGuardMiddleware)
    app.state.head_timeout_s = settings.body_timeout_s  # served by uvicorn: `head_deadline.uvicorn_config`
    return app


__all__ = ["create_app"]
