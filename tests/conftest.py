"""Project-wide test settings: Hypothesis profiles and shared fixtures."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from compactsim.harness.core.gc_passes import use_fewer_gc_passes

# `ci`: derandomized, no example database, reproduction blob printed on failure.
settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    print_blob=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, max_examples=200)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# the collector thresholds the `compactsim` command runs with (harness/core/gc_passes.py)
use_fewer_gc_passes()

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"


@pytest.fixture(scope="session")
def example_transport() -> dict[str, Any]:
    """The reference §8 payload: real nemo-gym 0.7.0 transport response, 3 calls, 1 boundary."""
    return json.loads((EXAMPLES / "gym-0.7.0-transport-compacted-3call.json").read_text())


@pytest.fixture(scope="session")
def example_pr2870() -> dict[str, Any]:
    """The same rollout in the Gym PR #2870 shape (`rollout_trace_contract`)."""
    return json.loads((EXAMPLES / "gym-pr2870-transport-compacted-3call.json").read_text())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files holding `slow` tests first, each file's own order kept.

    `make test` hands whole files to two pytest-xdist workers in this order (`--dist=loadfile
    --no-loadscope-reorder`): the long end-to-end files start first and the many quick unit files
    fill the gaps, instead of one long file running alone at the end.
    """
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: files and tests keep their order
