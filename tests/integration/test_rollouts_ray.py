"""Ray on 127.0.0.1: a local session stays on loopback and leaves the driver as it found it, and Ray
actors give byte-identical results to the local executor, for 1 and 2 workers.

One local Ray session serves every check (starting one costs several seconds of both cores):
the executors join it, as they join any Ray already initialised.
"""

from __future__ import annotations

import os

import pytest

from compactsim.agents import InProcessServers, LocalExecutor, RayExecutor, RolloutScript, RolloutSpec, collect, policy_preset
from compactsim.agents.collect import server_script
from compactsim.agents.collect.ray_local import LOCAL_RAY_ENV, local_ray
from compactsim.agents.rollout.script import scripted_turns

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300),
              pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")]


def _specs() -> list[RolloutSpec]:
    return [
        RolloutSpec(rollout_id=f"rollout-{i}", group_id="g", task_id="t", rollout_index=i, seed=40 + i,
                    script=RolloutScript(turns=scripted_turns(40, turns=4)),
                    context_history=policy_preset(preset), flavour=flavour)
        for i, (preset, flavour) in enumerate([("recency-images-k2", "gym-0.7.0-transport"),
                                               ("summary-at3", "gym-pr2870"),
                                               ("identity", "none"),
                                               ("recency-images-k1-chunked2", "gym-0.7.0-full"),
                                               ("recency-reasoning-last1", "osworld")])
    ]


def _worker_env() -> dict[str, str | None]:
    home = os.environ.get("HOME", "")
    bootstrap = os.path.join(home, "ray_bootstrap_config.yaml")
    return {
        "usage": os.environ.get("RAY_USAGE_STATS_ENABLED"),
        "bootstrap": open(bootstrap, encoding="utf-8").read() if os.path.exists(bootstrap) else None,
    }


def test_local_ray_stays_on_loopback_and_its_actors_match_the_local_executor_byte_for_byte():
    import ray

    specs = _specs()
    servers = InProcessServers({"seed": 40, "script": server_script(specs)}, {"rule": {"kind": "pattern", "pattern": [1.0, 0.0]}})
    local = [c.artifact_digest() for c in collect(specs, servers, executor=LocalExecutor(2))]
    before = {k: os.environ.get(k) for k in ("HOME", *LOCAL_RAY_ENV)}
    with local_ray(2):
        node = ray.nodes()[0]
        assert node["NodeManagerAddress"] == "127.0.0.1"
        assert ray._private.worker.global_worker.node.gcs_address.startswith("127.0.0.1:")
        assert ray.get_runtime_context().get_node_id()
        # the workers see the private HOME's autoscaler config (no cloud metadata probes) and no usage stats
        assert ray.get(ray.remote(_worker_env).remote()) == {"usage": "0", "bootstrap": "provider: {type: local}\n"}
        assert {k: os.environ.get(k) for k in ("HOME", *LOCAL_RAY_ENV)} == before  # the driver's own are restored
        for workers in (1, 2):
            on_ray = collect(specs, servers, executor=RayExecutor(workers))
            assert [c.rollout_id for c in on_ray] == [s.rollout_id for s in specs]
            assert [c.artifact_digest() for c in on_ray] == local
        assert ray.is_initialized()  # the executors joined this session and left it running
    assert not ray.is_initialized()
