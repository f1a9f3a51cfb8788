"""Broken backend: the async GRPO loop keeps the rollouts' recorded routes in its train data whatever
``policy.router_replay_enabled`` says, so with router replay off its training forward still replays them.

NeMo-RL keeps ``routed_experts`` in the train data only when router replay is on (``_preserve_router_replay_routed_
experts``, nemo-rl-semantics §2.5), and has an async test of its own for it (test_grpo_router_replay_async.py, "keeps
routed_experts only when R3 is on"): the async loop builds its train data separately (`_build_async_grpo_train_data`,
§6.4), so a port can get the sync path right and the async one wrong. Sync runs are the reference's; no catalogue
async scenario turned router replay off.
"""

from __future__ import annotations

from unittest.mock import patch

from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.gradient"
SCENARIO = "async-replay-off"


class Backend(ReferenceBackend):
    name = "async-replays-routes-with-replay-off"

    def train_step(self, state, batch, cfg):
        if not cfg.grpo.async_grpo.enabled or cfg.policy.router_replay_enabled or batch.routed_experts is None:
            return super().train_step(state, batch, cfg)
        on = cfg.model_copy(update={"policy": cfg.policy.model_copy(update={"router_replay_enabled": True})})
        check = T.check_batch
        # the refusals are made against the config as it is (replay off); only the forward reads the routes
        with patch.object(T, "check_batch", lambda batch_, cfg_: check(batch_, cfg)):
            return super().train_step(state, batch, on)
