"""The loss's diagnostic metrics a correct trainer reports for one optimizer step, in float64.

Written from `shared/reference/nemo-rl-semantics.md` §4.6 ("Metrics" and "Worker and driver
aggregation"), with the ratio of §4.3, the importance weights and truncation of §4.4 and the KL
estimators of §4.5. Per trained token (``m = token_mask[:, 1:] · sample_mask``, §4.2), with
``prev`` the logprob under the weights before the step — the oracle's own forward pass on exactly
those weights, so ``prev = curr`` in value:

- ``probs_ratio`` / ``probs_ratio_clamped``: masked means of ``r`` and ``r̂`` (§4.3: ``r = exp(lp −
  prev)``, ``r̂ = clamp(r, 1 − ε_low, 1 + ε_high)``; ``r = r̂ = exp(lp − sg(lp))`` under
  `force_on_policy_ratio`; ``r = r̂ = lp`` under `disable_ppo_ratio`);
- ``probs_ratio[_clamped]_min`` / ``_max``: extrema of ``r`` / ``r̂`` over the positions where
  ``m ≠ 0``;
- ``gen_kl_error`` = masked mean of ``k(x = prev − gen)`` and ``policy_kl_error`` of ``k(x = gen −
  prev)``, ``k`` the configured estimator without clamps (§4.5: ``x = ref − logprobs``; k1 ``−x``,
  k2 ``x²/2``, k3 ``eˣ − 1 − x``);
- ``js_divergence_error`` = masked mean of ``½(eᵃ − a − 1) + ½(eᵇ − b − 1)`` with ``log M =
  log(½e^prev + ½e^gen)``, ``a = prev − log M``, ``b = gen − log M``;
- ``sampling_importance_ratio`` = masked mean of ``w`` after truncation (§4.4; token level — GSPO's
  sequence-level weights are not a setting of the physical-trace path);
- ``approx_entropy`` = ``−masked mean of exp(lp − gen)·lp``;
- ``is_oob_ratio`` (only with `truncated_importance_sampling_type`, §4.4 "each variant also reports
  is_oob_ratio"): the share of what the truncation found out of bounds — trained *tokens* for
  `tis` (raw ``w`` outside ``[min or 0, max]``) and `icepop` (outside ``[min, max]``), normalised by
  ``N_tok``; *sequences* for `seq-mask-tis` (``exp(mean_t(prev − gen))`` outside ``[min, max]``),
  ``Σ_rows sample_mask·[out] / (N_seq + 1e-8)`` — NeMo-RL's `metric_normalizations` advertises
  TOKENS for the first two and SEQUENCES for the last (§4.6; loss_functions.py:596-669);
- ``num_valid_samples`` = ``Σ sample_mask`` (a count, §4.6).

"Masked mean" is NeMo-RL's ``Σ v·m / (N_tok + 1e-8)`` with the *global* count ``N_tok`` (§4.6).

What one step's number means (§4.6 aggregation). A trainer computes each metric per micro-batch,
the mean-like ones already divided by the global ``N_tok`` (or ``N_seq``), so summing the
micro-batches of every data-parallel rank gives the global masked mean; the worker divides every
non-``_min``/``_max`` metric by ``num_global_batches``, which is 1 here (one logical batch, one
global batch, one optimizer step per ``train_step``); counts sum. ``_min``/``_max`` are the
extremum over one micro-batch's trained positions — ``+inf``/``−inf`` for a micro-batch with none,
the identity of min/max — and combine by min/max. The oracle has no micro-batches: it computes each
sum once over all the step's trained tokens and each extremum over all of them, which is what the
combination adds up to whatever the layout; a step with no trained token keeps ``+inf``/``−inf``
(NeMo-RL's driver logs such an empty extremum as −1.0, §3.7, so the audit accepts −1.0 there too:
a backend may report the worker's combined value or the driver's; a −1.0 from one empty
micro-batch in a step that does train tokens is still a finding).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from compactsim.harness.oracle.step_loss import NORMALIZER_EPS, importance_weights, kl_estimator
from compactsim.harness.oracle.step_settings import LossSettings


@dataclass(frozen=True, slots=True)
class RowTokens:
    """One row's trained tokens, in token order, as the metrics read them (float64, no gradient)."""

    #: Logprob of each trained token under the weights before the step (``prev``; also ``curr``).
    logprobs: torch.Tensor
    #: The behaviour (generation) logprob of each trained token.
    generation_logprobs: torch.Tensor
    sample_mask: float


@dataclass(frozen=True, slots=True)
class LossMetrics:
    """The step's loss diagnostics under NeMo-RL's names (see the module docstring for each formula)."""

    probs_ratio: float
    probs_ratio_clamped: float
    probs_ratio_min: float
    probs_ratio_max: float
    probs_ratio_clamped_min: float
    probs_ratio_clamped_max: float
    gen_kl_error: float
    policy_kl_error: float
    js_divergence_error: float
    sampling_importance_ratio: float
    approx_entropy: float
    #: None unless truncated importance sampling is configured (the metric does not exist then).
    is_oob_ratio: float | None
    num_valid_samples: float


def _ratios(lp: torch.Tensor, s: LossSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """``r`` and ``r̂`` of §4.3 at ``prev = lp`` (the weights before the step)."""
    ratio = torch.exp(lp - lp)  # r = exp(lp − prev); exp(lp − sg(lp)) under force_on_policy_ratio: the same value
    if s.force_on_policy_ratio:  # checked first, as the loss does (§4.3)
        return ratio, ratio
    if s.disable_ppo_ratio:
        return lp, lp
    return ratio, ratio.clamp(1.0 - s.ratio_clip_min, 1.0 + s.ratio_clip_max)


def loss_metrics(rows: Sequence[RowTokens], settings: LossSettings, *, n_tokens: float, n_seqs: float) -> LossMetrics:
    """The step's loss metrics from every row of its logical batch (rows with ``sample_mask = 0`` add nothing).

    `n_tokens` (``Σ sample_mask · trained tokens``) and `n_seqs` (``Σ sample_mask``) are the global
    counts of the whole logical batch; each gets NeMo-RL's ``+ 1e-8``.
    """
    s = settings
    tok_den = n_tokens + NORMALIZER_EPS
    seq_den = n_seqs + NORMALIZER_EPS
    sums: dict[str, list[float]] = {k: [] for k in ("r", "r_hat", "gen_kl", "policy_kl", "js", "w", "entropy", "oob")}
    lows: list[float] = []
    highs: list[float] = []
    low_clamped: list[float] = []
    high_clamped: list[float] = []
    for row in rows:
        if row.sample_mask == 0:
            continue
        prev = row.logprobs.to(torch.float64)
        gen = row.generation_logprobs.to(torch.float64)
        weight = float(row.sample_mask)

        def add(key: str, values: torch.Tensor) -> None:
            sums[key].append(weight * float(values.sum()))

        ratio, clamped = _ratios(prev, s)
        add("r", ratio)
        add("r_hat", clamped)
        if prev.numel():
            lows.append(float(ratio.min()))
            highs.append(float(ratio.max()))
            low_clamped.append(float(clamped.min()))
            high_clamped.append(float(clamped.max()))
        add("gen_kl", kl_estimator(prev - gen, s.reference_policy_kl_type))
        add("policy_kl", kl_estimator(gen - prev, s.reference_policy_kl_type))
        log_m = torch.logaddexp(prev, gen) - math.log(2.0)  # log(½e^prev + ½e^gen)
        a, b = prev - log_m, gen - log_m
        add("js", 0.5 * (torch.expm1(a) - a) + 0.5 * (torch.expm1(b) - b))
        weights = importance_weights(prev, gen, s)
        add("w", weights.weights)
        add("entropy", torch.exp(prev - gen) * prev)
        if weights.out_of_bounds is not None:
            add("oob", weights.out_of_bounds.to(torch.float64))  # per token, or the row's one flag

    def mean(key: str, den: float = tok_den) -> float:
        return math.fsum(sums[key]) / den

    oob: float | None = None
    if s.truncated_importance_sampling_type is not None:
        oob = mean("oob", seq_den if s.truncated_importance_sampling_type == "seq-mask-tis" else tok_den)
    return LossMetrics(
        probs_ratio=mean("r"),
        probs_ratio_clamped=mean("r_hat"),
        probs_ratio_min=min(lows, default=math.inf),
        probs_ratio_max=max(highs, default=-math.inf),
        probs_ratio_clamped_min=min(low_clamped, default=math.inf),
        probs_ratio_clamped_max=max(high_clamped, default=-math.inf),
        gen_kl_error=mean("gen_kl"),
        policy_kl_error=mean("policy_kl"),
        js_divergence_error=mean("js"),
        sampling_importance_ratio=mean("w"),
        approx_entropy=-mean("entropy"),
        is_oob_ratio=oob,
        num_valid_samples=math.fsum(float(r.sample_mask) for r in rows),
    )


__all__ = ["LossMetrics", "RowTokens", "loss_metrics"]
