"""Broken backend: `gen_kl_error` and `policy_kl_error` always use the k3 estimator, whatever `reference_policy_kl_type` says.

NeMo-RL computes both with the configured kl_type and no clamps (nemo-rl-semantics §4.6). Training is the
reference's; only the two reported metrics change, and only where the behaviour logprobs differ from the
trainer's (gen ≠ prev): with gen = prev every estimator is 0, so the catalogue's k1/k2 scenarios, which serve
from the policy itself, cannot show it. The catalogue's edge case `loss-metrics-k1-mismatch` (scripted logprobs, k1) does.
"""

from __future__ import annotations

import math

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.loss import NORMALIZER_EPS
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState
from tests.quality._patching import loss_replaced, next_token_frame

EXPECTED_CHECK = "train.metric"
EXPECTED_KEY = "gen_kl_error"
#: A loss-metric edge case of the catalogue (tests/quality/test_broken_backends_are_caught.py EDGE_CASES).
SCENARIO = "loss-metrics-k1-mismatch"


class Backend(ReferenceBackend):
    name = "mismatch-kl-always-k3"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        def wrap(original):
            def loss(cfg_, **kw):
                import torch

                out = original(cfg_, **kw)
                _, prev, mask = next_token_frame(kw)
                gen = kw["generation_logprobs"][:, 1:].to(torch.float64)
                gen, prev = torch.where(mask != 0, gen, 0.0), torch.where(mask != 0, prev, 0.0)
                n = float(kw["global_valid_tokens"]) + NORMALIZER_EPS

                def k3_mean(x: torch.Tensor) -> float:
                    return float(((torch.exp(x) - 1 - x) * mask).sum()) / n

                out.metrics.update({"gen_kl_error": k3_mean(prev - gen), "policy_kl_error": k3_mean(gen - prev)})
                assert math.isfinite(out.metrics["gen_kl_error"])
                return out
            return loss

        with loss_replaced(wrap):
            return super().train_step(state, batch, cfg)
