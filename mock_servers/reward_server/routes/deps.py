"""The dependency that hands routes the app's `RewardSettings` (tests may override it)."""

from __future__ import annotations

from fastapi import Request

from compactsim.mock_servers.reward_server.settings import RewardSettings


def get_settings(request: Request) -> RewardSettings:
    return request.app.state.settings


__all__ = ["get_settings"]
