"""Collect many rollouts (agent loop + reward + emitted evidence + ground truth) on threads or Ray actors."""

from compactsim.agents.collect.rollouts import (
    CollectedRollout,
    Executor,
    HttpServers,
    InProcessServers,
    LocalExecutor,
    RayExecutor,
    Servers,
    Timings,
    collect,
    make_executor,
    ray_session,
    run_rollout,
    server_script,
    verify_reward,
)

__all__ = [
    "CollectedRollout",
    "Executor",
    "HttpServers",
    "InProcessServers",
    "LocalExecutor",
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
