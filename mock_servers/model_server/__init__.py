"""Deterministic vLLM-compatible mock model server (scripted or tiny-policy backed)."""

from mock_servers.model_server.app import create_app
from mock_servers.model_server.settings import FaultSpec, Limits, PolicySettings, ScriptStep, ScriptToolCall, ServerSettings

__all__ = ["FaultSpec", "Limits", "PolicySettings", "ScriptStep", "ScriptToolCall", "ServerSettings", "create_app"]
