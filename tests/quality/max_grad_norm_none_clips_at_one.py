"""Broken backend: ``policy.max_grad_norm: null`` (no clipping) is read as "use the default", and the gradient is
clipped to 1.0 anyway: ``max_norm = cfg.policy.max_grad_norm or 1.0`` (the same slip as a YAML/OmegaConf merge in
which a ``null`` override loses to the dataclass default).

NeMo-RL clips only when max_grad_norm is set (nemo-rl-semantics §4.6 / the oracle: clip by
``min(1, c/(‖g‖+1e-6))`` with the configured c; None means the gradient is applied as computed). Whenever the
unclipped norm stays at or below 1.0 the two agree exactly; a step with ‖g‖ > 1 under "no clipping" trains a
shrunken gradient. The reported ``grad_norm`` is the pre-clip norm either way, so only the applied gradient shows it.
"""

from __future__ import annotations

from unittest.mock import patch

from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.gradient"
SCENARIO = "no-clip-gradient-above-one"


class Backend(ReferenceBackend):
    name = "max-grad-norm-none-clips-at-one"

    def train_step(self, state, batch, cfg):
        clip = T._clip_grad_norm

        def clip_with_default(params, max_norm):
            return clip(params, max_norm or 1.0)

        with patch.object(T, "_clip_grad_norm", clip_with_default):
            return super().train_step(state, batch, cfg)
