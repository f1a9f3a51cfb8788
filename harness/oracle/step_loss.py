"""The oracle's clipped policy-gradient loss, one row's trained tokens at a time, in float64.

Written from `shared/reference/nemo-rl-semantics.md` §4 (NeMo-RL `ClippedPGLossFn`), for the
trained positions of one row only (``m = token_mask[:, 1:] · sample_mask``, §4.2), each token's
logprob in its own position:

- ratio (§4.3): ``r = exp(lp − prev)``, ``r̂ = clamp(r, 1 − ε_low, 1 + ε_high)``; under
  `force_on_policy_ratio` ``r = r̂ = exp(lp − sg(lp))``; under `disable_ppo_ratio` ``r = r̂ = lp``;
  ``ℓ = max(−A·r, −A·r̂)``; dual clip: where ``A < 0``, ``ℓ = min(ℓ, −A·c)``.
- importance weights (§4.4), token level: ``w = nan_to_num(exp(prev − gen))`` (NaN, ±inf → 0);
  `tis` clamps to ``[min or 0, max]``; `icepop` zeroes weights outside ``[min, max]``;
  `seq-mask-tis` zeroes the whole row when ``exp(mean_t(prev − gen))`` is outside ``[min, max]``.
  The weights multiply ``ℓ`` only with `use_importance_sampling_correction`; they carry no gradient.
- KL (§4.5): ``x = clamp(ref − lp, ±in)``; k1 ``−x``, k2 ``x²/2``, k3 ``eˣ − 1 − x``; times the weight
  ``exp(lp − sg(lp))`` (value 1, the score-function gradient; detached where the input clamp
  bites), clamped to ``±out``; scaled by ``β``.
- normalisation (§4.6): the caller divides the *sums* returned here by the global count of trained
  tokens of the whole logical batch plus 1e-8 — one division for the whole batch, whatever the
  micro-batch or data-parallel layout, which is what NeMo-RL's per-micro-batch division by the
  global count adds up to.

`prev` is the logprob under the weights before the step, i.e. ``sg(lp)`` here: the oracle's
forward pass runs on exactly those weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from compactsim.harness.oracle.step_settings import LossSettings

#: NeMo's masked_mean adds this to its global denominators (§4.6).
NORMALIZER_EPS = 1e-8


@dataclass(frozen=True, slots=True)
class RowLoss:
    """One row's un-normalised contributions: Σ w·ℓ over its trained tokens, and Σ β·kl."""

    actor_sum: torch.Tensor
    kl_sum: torch.Tensor


def kl_estimator(x: torch.Tensor, kind: str) -> torch.Tensor:
    """Schulman's per-token KL estimators of §4.5, from ``x = ref − logprobs``, unclamped."""
    if kind == "k1":
        return -x
    if kind == "k2":
        return 0.5 * x * x
    if kind == "k3":
        return torch.exp(x) - 1.0 - x
    raise ValueError(f"reference_policy_kl_type={kind!r}: expected k1, k2 or k3")


@dataclass(frozen=True, slots=True)
class ImportanceWeights:
    """Token-level weights after truncation (§4.4) and what the truncation found out of bounds.

    `out_of_bounds` is per token for `tis`/`icepop` (the raw weight outside the bounds), a 0-d flag
    for the whole row under `seq-mask-tis` (its geometric-mean weight outside them), and None
    without truncation (NeMo-RL then reports no `is_oob_ratio`).
    """

    weights: torch.Tensor
    out_of_bounds: torch.Tensor | None


def importance_weights(prev: torch.Tensor, gen: torch.Tensor, s: LossSettings) -> ImportanceWeights:
    """``w = exp(prev − gen)`` per trained token (NaN, ±inf → 0), truncated as `s` says (§4.4)."""
    log_w = prev - gen
    w = torch.exp(log_w)
    w = torch.where(torch.isfinite(w), w, torch.zeros_like(w))
    kind, hi, lo = s.truncated_importance_sampling_type, s.truncated_importance_sampling_ratio, s.truncated_importance_sampling_ratio_min
    if kind is None:
        return ImportanceWeights(w, None)
    if kind == "tis":
        low = 0.0 if lo is None else lo
        return ImportanceWeights(w.clamp(low, hi), (w < low) | (w > hi))
    if kind == "icepop":
        kept = (w >= lo) & (w <= hi)
        return ImportanceWeights(torch.where(kept, w, torch.zeros_like(w)), ~kept)
    if kind == "seq-mask-tis":
        finite = torch.where(torch.isfinite(log_w), log_w, torch.zeros_like(log_w))
        geo = math.exp(float(finite.sum()) / (finite.numel() + NORMALIZER_EPS))
        kept = lo <= geo <= hi
        return ImportanceWeights(w if kept else torch.zeros_like(w), torch.tensor(not kept))
    raise ValueError(f"truncated_importance_sampling_type={kind!r}")


def row_loss(
    lp: torch.Tensor,
    gen: torch.Tensor,
    ref: torch.Tensor | None,
    advantage: float,
    settings: LossSettings,
) -> RowLoss:
    """Contributions of one row's trained tokens (1-D tensors in token order; `lp` carries the gradient)."""
    s = settings
    prev = lp.detach()
    a = torch.full_like(lp, float(advantage))
    if s.force_on_policy_ratio:
        ratio = torch.exp(lp - lp.detach())
        clipped = ratio
    elif s.disable_ppo_ratio:
        ratio = clipped = lp
    else:
        ratio = torch.exp(lp - prev)
        clipped = ratio.clamp(1.0 - s.ratio_clip_min, 1.0 + s.ratio_clip_max)
    per_token = torch.maximum(-a * ratio, -a * clipped)
    if s.ratio_clip_c is not None:
        per_token = torch.where(a < 0, torch.minimum(per_token, -a * s.ratio_clip_c), per_token)
    if s.use_importance_sampling_correction:
        per_token = importance_weights(prev, gen, s).weights.detach() * per_token
    actor = per_token.sum()

    beta = s.reference_policy_kl_penalty
    if beta == 0:
        return RowLoss(actor, torch.zeros((), dtype=lp.dtype))
    if ref is None:
        raise ValueError("the KL penalty is on but no reference logprobs were given")
    x = ref - lp
    weight = torch.exp(lp - lp.detach())
    if s.kl_input_clamp_value is not None:
        c = s.kl_input_clamp_value
        clamped = x.clamp(-c, c)
        weight = torch.where(clamped == x, weight, weight.detach())
        x = clamped
    kl = weight * kl_estimator(x, s.reference_policy_kl_type)
    if s.kl_output_clamp_value is not None:
        kl = kl.clamp(-s.kl_output_clamp_value, s.kl_output_clamp_value)
    return RowLoss(actor, beta * kl.sum())


__all__ = ["NORMALIZER_EPS", "ImportanceWeights", "RowLoss", "importance_weights", "kl_estimator", "row_loss"]
