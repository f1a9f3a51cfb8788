"""Collect many rollouts (agent loop + reward + emitted evidence + ground truth) on threads, processes or Ray actors."""

from compactsim.agents.collect.executors import (
    EXECUTOR_KINDS,
    Executor,
    LocalExecutor,
    ProcessExecutor,
    RayExecutor,
    collect,
    make_executor,
    ray_session,
)
from compactsim.agents.collect.rollouts import (
    CollectedRollout,
    HttpServers,
    InProcessServers,
    Servers,
    Timings,
    run_rollout,
    server_script,
    verify_reward,
)

__all__ = [
    "EXECUTOR_KINDS",
    "CollectedRollout",
    "Executor",
    "HttpServers",
    "InProcessServers",
    "LocalExecutor",
    "ProcessExecutor",
    "RayExecutor",
    "Servers",
    "Timings",
    "collect",
    "make_executor",
    "ray_session",
    "run_rollout",
    "server_script",
    "verify_reward",
]
