"""Broken backend: the training forward replays the batch's recorded routes whenever the batch carries them,
whatever ``policy.router_replay_enabled`` says (``routes = batch.get("routed_experts")`` in place of a check of the
R3 flag). NeMo-RL keeps ``routed_experts`` in the train data only when router replay is on
(``_preserve_router_replay_routed_experts``, nemo-rl-semantics §2.5; test_grpo_router_replay_async.py "keeps
routed_experts only when R3 is on"); with it off the trainer's own router picks every expert. The batch itself
(its rows, its route tensor) is the reference's.
"""

from __future__ import annotations

from unittest.mock import patch

from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.gradient"
SCENARIO = "fault-no-routes-replay-off"


class Backend(ReferenceBackend):
    name = "replay-routes-with-replay-off"

    def train_step(self, state, batch, cfg):
        if cfg.policy.router_replay_enabled or batch.routed_experts is None:
            return super().train_step(state, batch, cfg)
        on = cfg.model_copy(update={"policy": cfg.policy.model_copy(update={"router_replay_enabled": True})})
        check = T.check_batch
        # the refusals are made against the config as it is (replay off); only the forward reads the routes
        with patch.object(T, "check_batch", lambda batch_, cfg_: check(batch_, cfg)):
            return super().train_step(state, batch, on)
