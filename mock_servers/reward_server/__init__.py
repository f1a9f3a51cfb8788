"""Deterministic mock reward server: `/verify` returns each rollout's known reward."""

from compactsim.mock_servers.reward_server.app import create_app
from compactsim.mock_servers.reward_server.settings import RewardRule, RewardSettings

__all__ = ["RewardRule", "RewardSettings", "create_app"]
