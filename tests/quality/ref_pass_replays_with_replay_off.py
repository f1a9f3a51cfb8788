"""Broken backend: the KL reference pass replays the batch's recorded routes whatever `policy.router_replay_enabled`
says ("the reference must see the routes the rollout saw"), while the policy's own forwards follow the switch.

As in the reference trainer, the reference logprobs of a step whose reference weights still equal the policy's
(step 0) are the training forward's own, so the bug only shows once the weights moved: at step >= 1 with router
replay off and routes recorded. Every replay-off scenario of the catalogue is one step long.
"""

from __future__ import annotations

from unittest.mock import patch

from compactsim.harness.pipeline import trainer as trainer_module
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.loss"
SCENARIO = "replay-off-two-steps"

_all_logprobs = trainer_module._all_logprobs


def _reference_logprobs(policy, batch, microbatches, row_images, row_routes):
    routes = batch.routed_experts if row_routes is None else row_routes  # the reference always replays
    return _all_logprobs(policy, batch, microbatches, row_images, routes)


class Backend(ReferenceBackend):
    name = "ref-pass-replays-with-replay-off"

    def train_step(self, state, batch, cfg):
        with patch.object(trainer_module, "_all_logprobs", _reference_logprobs):
            return super().train_step(state, batch, cfg)
