"""Ray actors on 127.0.0.1 give byte-identical results to the local executor, for 1 and 2 workers."""

from __future__ import annotations

import pytest

from compactsim.agents import InProcessServers, LocalExecutor, RayExecutor, RolloutScript, RolloutSpec, collect, policy_preset
from compactsim.agents.collect import server_script
from compactsim.agents.rollout.script import scripted_turns

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300),
              pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")]


def test_ray_and_local_executors_give_byte_identical_results():
    specs = [
        RolloutSpec(rollout_id=f"rollout-{i}", group_id="g", task_id="t", rollout_index=i, seed=40 + i,
                    script=RolloutScript(turns=scripted_turns(40, turns=4)),
                    context_history=policy_preset(preset), flavour=flavour)
        for i, (preset, flavour) in enumerate([("recency-images-k2", "gym-0.7.0-transport"),
                                               ("summary-at3", "gym-pr2870"),
                                               ("identity", "none"),
                                               ("recency-images-k1-chunked2", "gym-0.7.0-full"),
                                               ("recency-reasoning-last1", "osworld")])
    ]
    servers = InProcessServers({"seed": 40, "script": server_script(specs)}, {"rule": {"kind": "pattern", "pattern": [1.0, 0.0]}})
    local = [c.artifact_digest() for c in collect(specs, servers, executor=LocalExecutor(2))]
    for workers in (1, 2):
        on_ray = collect(specs, servers, executor=RayExecutor(workers))
        assert [c.rollout_id for c in on_ray] == [s.rollout_id for s in specs]
        assert [c.artifact_digest() for c in on_ray] == local
