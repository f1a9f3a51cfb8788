"""Broken backend: the KL reference policy is reloaded from the current weights before every step.

NeMo-RL's reference is the initial checkpoint, fixed for the run (`reference_policy_logprobs` from a frozen
copy, nemo-rl-semantics §3.4 step 10); refreshing it each step makes the KL penalty measure only one step's
drift, and it is exactly 0 at the step itself (ref == prev).
"""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.loss"
SCENARIO = "no-clip-gradient-above-one"  # a strong k2 KL over two steps: non-zero at step 1


class Backend(ReferenceBackend):
    name = "reference-refreshed-each-step"

    def train_step(self, state, batch, cfg):
        if state.reference is not None:
            state.reference.load_state_dict(state.policy.state_dict())
        return super().train_step(state, batch, cfg)
