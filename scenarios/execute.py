"""Run a scenario step's rollouts against in-process mock servers (the side-effecting edge of `scenarios`).

`collect_step` is what tests, `compactsim scenarios` helpers and shrinking use to get a step's
`CollectedRollout`s (Gym results + ground-truth logs) without a port or a trainer. A runner that
trains in policy mode keeps one model server for the whole run instead (weights change between
steps) and passes it as `servers`.
"""

from __future__ import annotations

from compactsim.agents.collect import CollectedRollout, InProcessServers, LocalExecutor, collect
from compactsim.agents.rollout.loop import RetryPolicy
from compactsim.scenarios.build import model_server_settings, reward_server_settings, step_specs
from compactsim.scenarios.model import Scenario


def in_process_servers(scenario: Scenario) -> InProcessServers:
    """Mock model and reward servers for `scenario`, built inside the worker (no port)."""
    return InProcessServers(model_server_settings(scenario), reward_server_settings(scenario))


def collect_step(
    scenario: Scenario,
    step: int = 0,
    *,
    servers: object | None = None,
    workers: int = 1,
    retry: RetryPolicy | None = None,
) -> tuple[CollectedRollout, ...]:
    """Every rollout of `step`, in slot order (failed ones included, with `result` None)."""
    specs = step_specs(scenario, step)
    return tuple(
        collect(specs, servers or in_process_servers(scenario), executor=LocalExecutor(workers),  # type: ignore[arg-type]
                retry=retry or RetryPolicy())
    )


__all__ = ["collect_step", "in_process_servers"]
