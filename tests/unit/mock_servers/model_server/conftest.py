"""Fixtures for the mock model server tests (builders live in server_builders.py)."""

from __future__ import annotations

import pytest

from compactsim.harness.core.policy import configure_determinism
from compactsim.mock_servers.model_server import ServerSettings
from tests.unit.mock_servers.model_server.server_builders import SCRIPT


@pytest.fixture(autouse=True)
def _torch_threads() -> None:
    configure_determinism()


@pytest.fixture
def scripted_settings() -> ServerSettings:
    return ServerSettings(mode="scripted", seed=7, script=SCRIPT)


@pytest.fixture
def policy_settings() -> ServerSettings:
    return ServerSettings(mode="policy", seed=7, script=SCRIPT)
