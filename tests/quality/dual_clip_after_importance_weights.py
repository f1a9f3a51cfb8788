"""Broken backend: the dual-clip bound -A·c applied to the importance-weighted token loss, min(w·ℓ, -A·c), instead
of to the clipped surrogate before weighting, w·min(ℓ, -A·c) (nemo-rl-semantics §4.3-4.4).

Without importance-sampling correction w = 1 and both agree, and so they do with it wherever w stays below c; in
`dual-clip-importance-weights-above-c` the behaviour logprobs are -8, the trainer's far higher, so w > c on the
negative-advantage rollout's tokens and the bound cuts their loss and gradient.
"""

from __future__ import annotations

from unittest.mock import patch

from compactsim.harness.pipeline import trainer as trainer_module
from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._patching import loss_variant

EXPECTED_CHECK = "train.gradient"
SCENARIO = "dual-clip-importance-weights-above-c"

_LOSS = loss_variant(
    ("""    if cfg.ratio_clip_c is not None:
        dual_clip_tok = -adv * cfg.ratio_clip_c  # (B, S-1)  bounds the loss where A < 0
        pg_loss_tok = torch.where(adv < 0, torch.min(pg_loss_tok, dual_clip_tok), pg_loss_tok)
""", ""),
    ("""    actor_loss = global_mean(used_weights * pg_loss_tok)
""", """    weighted_tok = used_weights * pg_loss_tok
    if cfg.ratio_clip_c is not None:
        weighted_tok = torch.where(adv < 0, torch.min(weighted_tok, -adv * cfg.ratio_clip_c), weighted_tok)
    actor_loss = global_mean(weighted_tok)
"""),
)


class Backend(ReferenceBackend):
    name = "dual-clip-after-importance-weights"

    def train_step(self, state, batch, cfg):
        with patch.object(trainer_module, "clipped_pg_loss", _LOSS):
            return super().train_step(state, batch, cfg)
