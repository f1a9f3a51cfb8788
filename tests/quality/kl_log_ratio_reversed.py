"""Broken backend: the KL penalty's log-ratio is taken the other way round, ``x = lp − ref`` instead of NeMo-RL's
``x = ref − lp`` (nemo-rl-semantics §4.5: k1 = −x, k2 = x²/2, k3 = eˣ − 1 − x).

k3 with the ratio inverted no longer estimates KL(π || π_ref) (its expectation under π is χ²(π || π_ref) − KL):
``e^{lp−ref} − 1 − (lp − ref)`` punishes the tokens the policy made likelier exponentially and the ones it made
unlikelier only linearly, the opposite of the configured penalty. The value is non-negative and small near the
reference, and 0 with a zero gradient at step 0 (policy = reference), so a one-step run and a k2 run (x² is symmetric)
never show it. Only the penalty term is reversed; the logged mismatch metrics use their own (right) estimator call.
"""

from __future__ import annotations

from typing import Any
from unittest.mock import patch

from compactsim.harness.pipeline import loss as L
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.loss"
SCENARIO = "kl-k3-unclamped"

_ESTIMATE = L._kl_estimate


def _reversed(logprobs: Any, reference: Any, kl_type: str, **kw: Any) -> Any:
    if kw.get("weight") is None:  # gen_kl_error / policy_kl_error: right
        return _ESTIMATE(logprobs, reference, kl_type, **kw)
    return _ESTIMATE(reference, logprobs, kl_type, **kw)  # x = lp − ref


class Backend(ReferenceBackend):
    name = "kl-log-ratio-reversed"

    def train_step(self, state, batch, cfg):
        with patch.object(L, "_kl_estimate", _reversed):
            return super().train_step(state, batch, cfg)
