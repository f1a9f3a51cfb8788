"""Broken backend: prev (and reference) logprobs are computed without router replay; only the trained forward replays.

NeMo-RL passes `routed_experts` to every forward of the training batch (get_logprobs, the reference's,
and train), nemo-rl-semantics §2.5-2.6. Here `prev` lets the router choose; where its experts differ from
the recorded ones, the PPO ratio exp(curr - prev) is no longer 1 and the importance/clip terms move.
"""

from __future__ import annotations

from unittest.mock import patch

from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.gradient"
SCENARIO = "layout-dp2-microbatch2-mask-sample"  # router replay on; prev's own routing moves the ratio


class Backend(ReferenceBackend):
    name = "prev-logprobs-without-router-replay"

    def train_step(self, state, batch, cfg):
        original = T._all_logprobs

        def no_replay(policy, batch_, microbatches, row_images, row_routes):
            return original(policy, batch_, microbatches, row_images, None)

        # a separate reference pass at every step, as NeMo-RL runs it (the reference trainer leaves it out at step 0)
        with patch.object(T, "_all_logprobs", no_replay), patch.object(T, "_same_weights", lambda a, b: False):
            return super().train_step(state, batch, cfg)
