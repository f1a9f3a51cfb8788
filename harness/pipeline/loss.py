"""NeMo-RL's clipped policy-gradient (ClippedPG) loss for one microbatch, in plain torch.

Semantics: `shared/reference/nemo-rl-semantics.md` §4 (ClippedPGLossFn at NeMo-RL 7ea279abf).

Alignment (§4.2). Every per-token field arrives in *own-position* layout ``[B, S]``: column
``t`` holds the value for token ``t`` (its logprob given tokens ``< t``), column 0 is unused.
The model predicts token ``t`` from position ``t-1``, so everything is sliced ``[:, 1:]`` into the
*next-token* frame ``[B, S-1]`` before it is combined. `curr_logprobs` may come in either layout:
``[B, S]`` (own-position, sliced here) or ``[B, S-1]`` (already next-token).

Normalisation (§4.6). The loss and every mean-like metric are divided by the count of valid
tokens of the whole *logical batch* (all microbatches, all data-parallel ranks), not of this
microbatch, so summing the microbatch losses (and metrics, see `combine_metrics`) gives the
exact batch mean. A padding row (``sample_mask == 0``) or a padded position
(``token_mask == 0``) contributes exactly zero, even when its logprobs are ``±inf``/NaN.

The denominators carry NeMo's ``+ 1e-8`` (`NORMALIZER_EPS`): a mean of ones over ``N`` tokens is
``N / (N + 1e-8)``, i.e. ``1 - 1e-8/N``, not exactly 1.

Example::

    cfg = LossConfig(reference_policy_kl_penalty=0.0)
    n = valid_counts(token_mask, sample_mask)            # over the WHOLE logical batch
    out = clipped_pg_loss(cfg, curr_logprobs=mb_lp, token_mask=mb_tm, sample_mask=mb_sm,
                          advantages=mb_adv, prev_logprobs=mb_prev, generation_logprobs=mb_gen,
                          global_valid_tokens=n.tokens, global_valid_seqs=n.seqs)
    out.loss.backward()                                  # accumulate; no extra scaling
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from compactsim.harness.core.errors import ConfigError

if TYPE_CHECKING:  # torch is imported where a tensor is computed, so LossConfig loads without it
    import torch

#: NeMo's `masked_mean` adds this to every global denominator (loss/utils.py:212-224).
NORMALIZER_EPS = 1e-8

KLType = Literal["k1", "k2", "k3"]
TruncationType = Literal["tis", "icepop", "seq-mask-tis"]

#: Metric keys in the order `clipped_pg_loss` emits them. `is_oob_ratio` is present only when
#: `truncated_importance_sampling_type` is set (as in NeMo). Keys ending in `_min`/`_max` combine
#: across microbatches with min/max; every other key is already globally normalised (or a count)
#: and combines by summation.
METRIC_KEYS: tuple[str, ...] = (
    "loss",
    "actor_loss",
    "kl_penalty",
    "probs_ratio",
    "probs_ratio_clamped",
    "probs_ratio_min",
    "probs_ratio_max",
    "probs_ratio_clamped_min",
    "probs_ratio_clamped_max",
    "token_mult_prob_error",
    "gen_kl_error",
    "policy_kl_error",
    "js_divergence_error",
    "sampling_importance_ratio",
    "approx_entropy",
    "num_valid_samples",
    "is_oob_ratio",
)


class LossConfig(BaseModel):
    """ClippedPG settings (NeMo's `ClippedPGLossConfig` subset that the physical-trace path supports).

    Defaults are NeMo's. Construct with `LossConfig(**mapping)`; any problem (unknown key, wrong
    type, invalid combination) raises `ConfigError` listing every violation found.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    ratio_clip_min: float = 0.2  # ε_low: r̂ = clamp(r, 1 - ε_low, 1 + ε_high)
    ratio_clip_max: float = 0.2  # ε_high
    ratio_clip_c: float | None = None  # dual clip: where A < 0, ℓ = min(ℓ, -A·c); needs c > 1
    reference_policy_kl_penalty: float = 0.01  # β; 0 disables the KL term
    reference_policy_kl_type: KLType = "k3"  # Schulman's estimators of KL(π || π_ref)
    kl_input_clamp_value: float | None = 20.0  # clamp (ref - lp) to ±this before the estimator
    kl_output_clamp_value: float | None = 10.0  # clamp the weighted per-token KL to ±this
    use_importance_sampling_correction: bool = False  # weight tokens by w = exp(prev - gen)
    truncated_importance_sampling_type: TruncationType | None = None
    truncated_importance_sampling_ratio: float | None = None  # upper bound on w
    truncated_importance_sampling_ratio_min: float | None = None  # lower bound on w
    token_level_loss: bool = True  # False (per-sequence mean) is unsupported: see _violations
    force_on_policy_ratio: bool = False  # r = exp(lp - sg(lp)) == 1; prev := sg(curr)
    disable_ppo_ratio: bool = False  # REINFORCE: r = r̂ = lp

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise _as_config_error(exc) from None

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> LossConfig:
        try:
            return super().model_validate(obj, *args, **kwargs)
        except ValidationError as exc:
            raise _as_config_error(exc) from None

    @model_validator(mode="after")
    def _check_combinations(self) -> LossConfig:
        invalid, unsupported = _violations(self)
        if invalid or unsupported:
            code = "invalid_config" if invalid else "unsupported_config"
            n = len(invalid) + len(unsupported)
            raise ConfigError(code, f"LossConfig has {n} problem(s)", violations=tuple(invalid + unsupported))
        return self


def _violations(cfg: LossConfig) -> tuple[list[str], list[str]]:
    """Every invalid and every unsupported setting of `cfg`, as `field=value: why` lines."""
    invalid: list[str] = []
    unsupported: list[str] = []
    if not cfg.token_level_loss:
        unsupported.append(
            "token_level_loss=False: the per-sequence mean is not supported on the physical-trace path "
            "(a compacted rollout spans several rows, so a per-row mean would weight it by its row count); "
            "set token_level_loss=True"
        )
    for name in ("ratio_clip_min", "ratio_clip_max", "reference_policy_kl_penalty"):
        if getattr(cfg, name) < 0:
            invalid.append(f"{name}={getattr(cfg, name)!r}: expected >= 0")
    if cfg.ratio_clip_c is not None and cfg.ratio_clip_c <= 1:
        invalid.append(f"ratio_clip_c={cfg.ratio_clip_c!r}: dual clip needs ratio_clip_c > 1 (usually 3), or None")
    for name in ("kl_input_clamp_value", "kl_output_clamp_value"):
        value = getattr(cfg, name)
        if value is not None and value <= 0:
            invalid.append(f"{name}={value!r}: expected > 0, or None for no clamp")
    if cfg.force_on_policy_ratio and cfg.disable_ppo_ratio:
        invalid.append(
            "force_on_policy_ratio=True and disable_ppo_ratio=True: they pick different ratios "
            "(exp(lp - sg(lp)) versus lp); set at most one"
        )

    kind = cfg.truncated_importance_sampling_type
    hi = cfg.truncated_importance_sampling_ratio
    lo = cfg.truncated_importance_sampling_ratio_min
    if kind is None:
        bounds = (("truncated_importance_sampling_ratio", hi), ("truncated_importance_sampling_ratio_min", lo))
        for name, value in bounds:
            if value is not None:
                invalid.append(
                    f"{name}={value!r} but truncated_importance_sampling_type=None: "
                    "set the type ('tis', 'icepop' or 'seq-mask-tis') or drop the bound"
                )
    else:
        if not cfg.use_importance_sampling_correction:
            invalid.append(
                f"truncated_importance_sampling_type={kind!r} needs use_importance_sampling_correction=True"
            )
        if hi is None or hi <= 0:
            invalid.append(f"truncated_importance_sampling_ratio={hi!r}: {kind!r} needs a positive upper bound")
        if kind in ("icepop", "seq-mask-tis") and lo is None:
            invalid.append(f"truncated_importance_sampling_ratio_min=None: {kind!r} needs a lower bound")
        if hi is not None and lo is not None and lo > hi:
            invalid.append(
                f"truncated_importance_sampling_ratio_min={lo!r} > truncated_importance_sampling_ratio={hi!r}: "
                "expected min <= max"
            )
    return invalid, unsupported


def _as_config_error(exc: ValidationError) -> ConfigError:
    """Re-raise our own combination error as is; turn pydantic's field errors into one ConfigError."""
    lines: list[str] = []
    for err in exc.errors():
        cause = (err.get("ctx") or {}).get("error")
        if isinstance(cause, ConfigError):
            return cause
        field = ".".join(str(part) for part in err["loc"]) or "<config>"
        lines.append(f"{field}={err.get('input')!r}: {err['msg']}")
    return ConfigError("invalid_config", f"LossConfig has {len(lines)} invalid field(s)", violations=tuple(lines))


@dataclass(frozen=True, slots=True)
class ValidCounts:
    """Global normalisers of one logical batch; add the counts of every microbatch and dp shard."""

    tokens: float  # Σ token_mask[:, 1:] · sample_mask
    seqs: float  # Σ sample_mask

    def __add__(self, other: ValidCounts) -> ValidCounts:
        return ValidCounts(self.tokens + other.tokens, self.seqs + other.seqs)


def valid_counts(token_mask: torch.Tensor, sample_mask: torch.Tensor) -> ValidCounts:
    """The valid-token and valid-sequence counts of some rows, as NeMo's data layer computes them."""
    import torch

    if token_mask.ndim != 2:
        raise ConfigError("invalid_argument", f"token_mask has shape {tuple(token_mask.shape)}: expected (B, S)")
    _check_shape("sample_mask", sample_mask, (token_mask.shape[0],))
    mask = token_mask[:, 1:].to(torch.float64) * sample_mask.to(torch.float64)[:, None]  # (B, S-1)
    return ValidCounts(tokens=float(mask.sum()), seqs=float(sample_mask.to(torch.float64).sum()))


class LossOutput(NamedTuple):
    """What one microbatch contributes: a loss to backprop as is, and its share of each metric."""

    loss: torch.Tensor  # scalar, already divided by the global valid-token count
    metrics: dict[str, float]  # keys: METRIC_KEYS; combine across microbatches with combine_metrics


def clipped_pg_loss(
    cfg: LossConfig,
    *,
    curr_logprobs: torch.Tensor,
    token_mask: torch.Tensor,
    sample_mask: torch.Tensor,
    advantages: torch.Tensor,
    prev_logprobs: torch.Tensor | None,
    generation_logprobs: torch.Tensor,
    reference_logprobs: torch.Tensor | None = None,
    global_valid_tokens: float | torch.Tensor,
    global_valid_seqs: float | torch.Tensor,
) -> LossOutput:
    """ClippedPG loss of one microbatch, normalised by the logical batch's global counts.

    Shapes: `token_mask`, `advantages`, `prev_logprobs`, `generation_logprobs`,
    `reference_logprobs` are ``[B, S]`` own-position; `sample_mask` is ``[B]``; `curr_logprobs` is
    ``[B, S]`` (own-position) or ``[B, S-1]`` (next-token) and carries the gradient.
    `prev_logprobs` may be None only under `force_on_policy_ratio` (it is then ``sg(curr)``);
    `reference_logprobs` may be None only when ``reference_policy_kl_penalty == 0``.
    `global_valid_tokens` / `global_valid_seqs` come from `valid_counts` over the whole logical
    batch. Computation happens in at least float32 (float64 stays float64).
    """
    import torch

    # --- Check the arguments, then align everything to the next-token frame (B, S-1) ---
    if token_mask.ndim != 2:
        raise ConfigError("invalid_argument", f"token_mask has shape {tuple(token_mask.shape)}: expected (B, S)")
    B, S = token_mask.shape
    _check_shape("sample_mask", sample_mask, (B,))
    if tuple(curr_logprobs.shape) not in ((B, S), (B, S - 1)):
        raise ConfigError(
            "invalid_argument",
            f"curr_logprobs has shape {tuple(curr_logprobs.shape)}: expected ({B}, {S}) own-position "
            f"or ({B}, {S - 1}) next-token, to match token_mask {(B, S)}",
        )
    for name, value in (
        ("advantages", advantages),
        ("prev_logprobs", prev_logprobs),
        ("generation_logprobs", generation_logprobs),
        ("reference_logprobs", reference_logprobs),
    ):
        if value is not None:
            _check_shape(name, value, (B, S))
    if prev_logprobs is None and not cfg.force_on_policy_ratio:
        raise ConfigError("invalid_argument", "prev_logprobs=None: only allowed with force_on_policy_ratio=True")
    beta = cfg.reference_policy_kl_penalty
    if reference_logprobs is None and beta != 0:
        raise ConfigError(
            "invalid_argument",
            f"reference_logprobs=None with reference_policy_kl_penalty={beta!r}: pass the reference "
            "policy's logprobs or set the penalty to 0",
        )

    dtype = torch.promote_types(curr_logprobs.dtype, torch.float32)
    device = curr_logprobs.device

    def next_token(x: torch.Tensor) -> torch.Tensor:  # (B, S) -> (B, S-1), computation dtype
        return x[:, 1:].to(device=device, dtype=dtype)

    sample_w = sample_mask.to(device=device, dtype=dtype)  # (B,)
    tok_mask = next_token(token_mask)  # (B, S-1)
    mask = tok_mask * sample_w[:, None]  # (B, S-1)  m: trained positions
    keep = mask != 0  # (B, S-1)
    local = valid_counts(token_mask, sample_mask)  # this microbatch's share, counted like the global one
    n_tokens = _global_count("global_valid_tokens", global_valid_tokens, local.tokens, dtype, device)
    n_seqs = _global_count("global_valid_seqs", global_valid_seqs, local.seqs, dtype, device)

    # Untrained positions are replaced by 0 *before* any arithmetic, so ±inf/NaN there can poison
    # neither the forward sums (0·inf) nor the backward pass (torch.where routes them no gradient).
    zero = torch.zeros((), dtype=dtype, device=device)
    curr_full = curr_logprobs.to(dtype)
    curr = torch.where(keep, curr_full[:, 1:] if curr_full.shape[1] == S else curr_full, zero)  # (B, S-1)
    adv = torch.where(keep, next_token(advantages), zero)  # (B, S-1)
    gen = torch.where(keep, next_token(generation_logprobs), zero)  # (B, S-1)
    if cfg.force_on_policy_ratio:
        prev = curr.detach()  # (B, S-1)
    else:
        assert prev_logprobs is not None
        prev = torch.where(keep, next_token(prev_logprobs), zero).detach()  # (B, S-1)
    ref = torch.where(keep, next_token(reference_logprobs), zero) if reference_logprobs is not None else None

    def global_mean(values: torch.Tensor) -> torch.Tensor:  # Σ v·m / (N_tok + eps), NeMo's masked_mean
        return (values * mask).sum() / (n_tokens + NORMALIZER_EPS)

    # --- Policy term: clipped surrogate per token (§4.3) ---
    if cfg.force_on_policy_ratio:
        ratio = torch.exp(curr - curr.detach())  # (B, S-1)  value 1, gradient of lp
        ratio_clamped = ratio
    elif cfg.disable_ppo_ratio:
        ratio = curr  # (B, S-1)  REINFORCE: the "ratio" is the logprob itself
        ratio_clamped = curr
    else:
        ratio = torch.exp(curr - prev)  # (B, S-1)
        ratio_clamped = ratio.clamp(1.0 - cfg.ratio_clip_min, 1.0 + cfg.ratio_clip_max)  # (B, S-1)
    pg_loss_tok = torch.max(-adv * ratio, -adv * ratio_clamped)  # (B, S-1)  pessimistic of the two
    if cfg.ratio_clip_c is not None:
        dual_clip_tok = -adv * cfg.ratio_clip_c  # (B, S-1)  bounds the loss where A < 0
        pg_loss_tok = torch.where(adv < 0, torch.min(pg_loss_tok, dual_clip_tok), pg_loss_tok)

    # --- Importance weights w = exp(prev - gen), optionally truncated (§4.4) ---
    is_weights = torch.nan_to_num(torch.exp(prev - gen), nan=0.0, posinf=0.0, neginf=0.0).detach()  # (B, S-1)
    is_oob_ratio: torch.Tensor | None = None
    hi = cfg.truncated_importance_sampling_ratio
    lo = cfg.truncated_importance_sampling_ratio_min
    if cfg.truncated_importance_sampling_type == "tis":
        lo = 0.0 if lo is None else lo
        is_oob_ratio = global_mean(((is_weights > hi) | (is_weights < lo)).to(dtype))
        is_weights = is_weights.clamp(lo, hi)  # (B, S-1)
    elif cfg.truncated_importance_sampling_type == "icepop":
        in_bounds = (is_weights >= lo) & (is_weights <= hi)  # (B, S-1)
        is_oob_ratio = global_mean((~in_bounds).to(dtype))
        is_weights = torch.where(in_bounds, is_weights, zero)  # (B, S-1)
    elif cfg.truncated_importance_sampling_type == "seq-mask-tis":
        log_w = torch.nan_to_num(prev - gen, nan=0.0, posinf=0.0, neginf=0.0)  # (B, S-1)
        seq_log_w = (log_w * tok_mask).sum(-1) / (tok_mask.sum(-1) + NORMALIZER_EPS)  # (B,)  row mean
        seq_geo_w = torch.exp(seq_log_w).detach()  # (B,)  geometric-mean weight of each sequence
        seq_kept = ((seq_geo_w >= lo) & (seq_geo_w <= hi)).to(dtype)  # (B,)
        is_oob_ratio = ((1.0 - seq_kept) * sample_w).sum() / (n_seqs + NORMALIZER_EPS)
        is_weights = is_weights * seq_kept[:, None]  # (B, S-1)  raw weights, whole rows dropped
    used_weights = is_weights if cfg.use_importance_sampling_correction else torch.ones_like(is_weights)

    # --- KL penalty to the reference policy (§4.5) ---
    if beta != 0:
        assert ref is not None
        kl_weight = torch.exp(curr - curr.detach())  # (B, S-1)  value 1, carries the score-function gradient
        kl_tok = _kl_estimate(
            curr,
            ref,
            cfg.reference_policy_kl_type,
            input_clamp=cfg.kl_input_clamp_value,
            output_clamp=cfg.kl_output_clamp_value,
            weight=kl_weight,
        )  # (B, S-1)
        kl_loss = global_mean(beta * kl_tok)
    else:
        kl_loss = zero

    # --- Total: the actor term plus the KL term, both already globally normalised ---
    actor_loss = global_mean(used_weights * pg_loss_tok)
    loss = actor_loss + kl_loss

    # --- Diagnostics (§4.6), each globally normalised so microbatch values sum to the batch value ---
    with torch.no_grad():
        lp_error = torch.abs(gen - prev)  # (B, S-1)
        log_mixture = torch.logaddexp(prev, gen) - math.log(2.0)  # (B, S-1)  log(½e^prev + ½e^gen)
        a, b = prev - log_mixture, gen - log_mixture  # (B, S-1)
        js_tok = 0.5 * (torch.exp(a) - a - 1) + 0.5 * (torch.exp(b) - b - 1)  # (B, S-1)
        kl_type = cfg.reference_policy_kl_type
        ratios_kept = ratio.detach()[keep]  # (local trained tokens,)
        clamped_kept = ratio_clamped.detach()[keep]  # (local trained tokens,)
        empty = ratios_kept.numel() == 0
        metrics: dict[str, float] = {
            "loss": loss.item(),
            "actor_loss": actor_loss.item(),
            "kl_penalty": kl_loss.item() / beta if beta != 0 else 0.0,
            "probs_ratio": global_mean(ratio.detach()).item(),
            "probs_ratio_clamped": global_mean(ratio_clamped.detach()).item(),
            "probs_ratio_min": math.inf if empty else ratios_kept.min().item(),
            "probs_ratio_max": -math.inf if empty else ratios_kept.max().item(),
            "probs_ratio_clamped_min": math.inf if empty else clamped_kept.min().item(),
            "probs_ratio_clamped_max": -math.inf if empty else clamped_kept.max().item(),
            "token_mult_prob_error": global_mean(torch.exp(lp_error * mask)).item(),
            "gen_kl_error": global_mean(_kl_estimate(gen, prev, kl_type)).item(),
            "policy_kl_error": global_mean(_kl_estimate(prev, gen, kl_type)).item(),
            "js_divergence_error": global_mean(js_tok).item(),
            "sampling_importance_ratio": global_mean(is_weights).item(),
            "approx_entropy": -global_mean(torch.exp(curr - gen) * curr).item(),
            "num_valid_samples": local.seqs,
        }
        if is_oob_ratio is not None:
            metrics["is_oob_ratio"] = is_oob_ratio.item()
    return LossOutput(loss=loss, metrics=metrics)


def _kl_estimate(
    logprobs: torch.Tensor,
    reference: torch.Tensor,
    kl_type: KLType,
    *,
    input_clamp: float | None = None,
    output_clamp: float | None = None,
    weight: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token estimate of KL(π || π_ref) from x = ref - lp: k1 = -x, k2 = x²/2, k3 = eˣ - 1 - x.

    Where the input clamp bites, `weight` is detached, so the clamp stops the score-function
    gradient as well as the estimator's (NeMo utils.py:75-80). The weighted value is then clamped.
    """
    import torch

    x = reference - logprobs  # (B, S-1)
    if input_clamp is not None:
        x_clamped = x.clamp(-input_clamp, input_clamp)
        if weight is not None:
            weight = torch.where(x == x_clamped, weight, weight.detach())
        x = x_clamped
    if kl_type == "k1":
        kl = -x
    elif kl_type == "k2":
        kl = 0.5 * x.square()
    else:  # k3
        kl = torch.exp(x) - 1 - x
    if weight is not None:
        kl = weight * kl
    if output_clamp is not None:
        kl = kl.clamp(-output_clamp, output_clamp)
    return kl


def combine_metrics(per_microbatch: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Batch metrics from the microbatch dicts of every dp rank: `_min`/`_max` by min/max, the rest summed.

    Sums use `math.fsum`, so the result does not depend on microbatch order or count. With no
    valid token anywhere, `_min` stays +inf and `_max` -inf.
    """
    if not per_microbatch:
        raise ConfigError("invalid_argument", "per_microbatch=[]: expected at least one microbatch's metrics")
    keys = list(per_microbatch[0])
    for i, metrics in enumerate(per_microbatch):
        if set(metrics) != set(keys):
            raise ConfigError(
                "invalid_argument",
                f"per_microbatch[{i}] has keys {sorted(metrics)}, per_microbatch[0] has {sorted(keys)}: "
                "all microbatches must come from the same LossConfig",
            )
    combined: dict[str, float] = {}
    for key in keys:
        values = [float(metrics[key]) for metrics in per_microbatch]
        if key.endswith("_min"):
            combined[key] = min(values)
        elif key.endswith("_max"):
            combined[key] = max(values)
        else:
            combined[key] = math.fsum(values)
    return combined


def _check_shape(name: str, value: torch.Tensor, expected: tuple[int, ...]) -> None:
    if tuple(value.shape) != expected:
        raise ConfigError("invalid_argument", f"{name} has shape {tuple(value.shape)}: expected {expected}")


def _global_count(
    name: str, value: float | torch.Tensor, local: float, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """The global normaliser as a tensor, refusing one smaller than this microbatch's own count."""
    import torch

    count = float(value)
    if not math.isfinite(count) or count < local * (1 - 1e-12):  # slack only for fractional sample masks
        raise ConfigError(
            "invalid_argument",
            f"{name}={count!r} is below this microbatch's own count {local!r}: pass the count over the "
            "whole logical batch (every microbatch and dp rank), e.g. from valid_counts()",
        )
    return torch.tensor(count, dtype=dtype, device=device)


__all__ = [
    "KLType",
    "LossConfig",
    "LossOutput",
    "METRIC_KEYS",
    "NORMALIZER_EPS",
    "TruncationType",
    "ValidCounts",
    "clipped_pg_loss",
    "combine_metrics",
    "valid_counts",
]
