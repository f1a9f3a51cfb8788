"""Broken backend: the REINFORCE path (``loss_fn.disable_ppo_ratio``) leaves the KL penalty out of the loss
("REINFORCE is -A·lp"), while ``kl_penalty`` is still computed and logged.

At the first step the reference is the policy: k3 and k2 are 0 there with a zero gradient, so the loss and the update
are right. Only k1 (whose gradient is beta per token even at the reference) or a later step shows it; every
disable_ppo_ratio scenario of the catalogue is one step under k3.
"""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._patching import loss_replaced, loss_variant

EXPECTED_CHECK = "train.gradient"
SCENARIO = "reinforce-kl-k1"

_reinforce_without_kl = loss_variant(
    ("    loss = actor_loss + kl_loss\n", "    loss = actor_loss if cfg.disable_ppo_ratio else actor_loss + kl_loss\n"),
)


class Backend(ReferenceBackend):
    name = "reinforce-drops-kl-term"

    def train_step(self, state, batch, cfg):
        with loss_replaced(lambda _original: _reinforce_without_kl):
            return super().train_step(state, batch, cfg)
