"""Broken backend: the step's loss and loss metrics are averaged over the data-parallel ranks (Megatron's
``average_losses_across_data_parallel_group``, an ``all_reduce(op=AVG)``) although each rank's value is already
divided by the *global* token count.

NeMo-RL's micro-batch values are globally normalised, so the step's value is their sum over micro-batches and ranks
(nemo-rl-semantics §4.6); averaging the per-rank sums logs 1/dp_size of every mean-like metric — the loss, the
actor loss, the KL, ``token_mult_prob_error`` (≈ 1/dp instead of ≈ 1) and the ratios. The gradient and the update
are the reference's, so the run trains right while every dashboard reads a dp-dependent number; at dp_size 1 it is
exact.
"""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._patching import with_metrics

EXPECTED_CHECK = "train.loss"
SCENARIO = "layout-dp2-microbatch2-mask-sample"

#: Loss metrics summed over micro-batches and ranks (`combine_metrics`); extrema and counts are left alone.
_MEANS = ("loss", "actor_loss", "kl_penalty", "probs_ratio", "probs_ratio_clamped", "token_mult_prob_error",
          "gen_kl_error", "policy_kl_error", "js_divergence_error", "sampling_importance_ratio", "approx_entropy",
          "is_oob_ratio")


class Backend(ReferenceBackend):
    name = "loss-metrics-averaged-over-ranks"

    def train_step(self, state, batch, cfg):
        result = super().train_step(state, batch, cfg)
        dp = batch.dp_size
        return with_metrics(result, {k: result.metrics[k] / dp for k in _MEANS if k in result.metrics})
