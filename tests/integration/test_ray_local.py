"""A local Ray session stays on loopback: its node and GCS addresses are 127.0.0.1."""

from __future__ import annotations

import os

import pytest

from compactsim.agents.collect.ray_local import LOCAL_RAY_ENV, local_ray


@pytest.mark.slow
def test_local_ray_binds_loopback_and_restores_the_driver_environment():
    import ray

    before = {k: os.environ.get(k) for k in ("HOME", *LOCAL_RAY_ENV)}
    with local_ray(1):
        ctx = ray.get_runtime_context()
        node = ray.nodes()[0]
        assert node["NodeManagerAddress"] == "127.0.0.1"
        assert ray._private.worker.global_worker.node.gcs_address.startswith("127.0.0.1:")
        assert ctx.get_node_id()

        @ray.remote
        def worker_env() -> dict[str, str | None]:
            home = os.environ.get("HOME", "")
            bootstrap = os.path.join(home, "ray_bootstrap_config.yaml")
            return {
                "usage": os.environ.get("RAY_USAGE_STATS_ENABLED"),
                "bootstrap": open(bootstrap, encoding="utf-8").read() if os.path.exists(bootstrap) else None,
            }

        env = ray.get(worker_env.remote())
        assert env == {"usage": "0", "bootstrap": "provider: {type: local}\n"}
        assert {k: os.environ.get(k) for k in ("HOME", *LOCAL_RAY_ENV)} == before
    assert not ray.is_initialized()
