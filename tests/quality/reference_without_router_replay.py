"""Broken backend: the KL reference policy's logprobs are computed without router replay.

NeMo-RL runs the reference forward on the same training data dict, `routed_experts` included (nemo-rl-semantics
§2.5-2.6, §3.4 step 10); letting the reference's router choose its own experts changes `ref` wherever they
differ from the recorded routes, and so the KL term.
"""

from __future__ import annotations

from unittest.mock import patch

from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.loss"
SCENARIO = "no-clip-gradient-above-one"  # a strong k2 KL under router replay


class Backend(ReferenceBackend):
    name = "reference-without-router-replay"

    def train_step(self, state, batch, cfg):
        original = T._all_logprobs

        def maybe_no_replay(policy, batch_, microbatches, row_images, row_routes):
            return original(policy, batch_, microbatches, row_images, None if policy is state.reference else row_routes)

        with patch.object(T, "_all_logprobs", maybe_no_replay):
            return super().train_step(state, batch, cfg)
