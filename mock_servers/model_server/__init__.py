"""Deterministic vLLM-compatible mock model server (scripted or tiny-policy backed).

`create_app` is loaded on first use (module `__getattr__`), so reading the settings models (as the
scenario catalogue does) never imports FastAPI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from compactsim.mock_servers.model_server.settings import FaultSpec, Limits, PolicySettings, ScriptStep, ScriptToolCall, ServerSettings

if TYPE_CHECKING:
    from compactsim.mock_servers.model_server.app import create_app

__all__ = ["FaultSpec", "Limits", "PolicySettings", "ScriptStep", "ScriptToolCall", "ServerSettings", "create_app"]


def __getattr__(name: str) -> Any:
    """Import the FastAPI app module only when `create_app` is asked for."""
    if name == "create_app":
        from compactsim.mock_servers.model_server.app import create_app

        return create_app
    raise AttributeError(f"module 'compactsim.mock_servers.model_server' has no attribute {name!r}")
