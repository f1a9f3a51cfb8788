"""The dependency that hands routes the app's `ServerState` (tests may override it)."""

from __future__ import annotations

from fastapi import Request

from compactsim.mock_servers.model_server.state import ServerState


async def get_state(request: Request) -> ServerState:
    """Async, so FastAPI resolves it on the loop instead of hopping to its threadpool."""
    return request.app.state.server


__all__ = ["get_state"]
