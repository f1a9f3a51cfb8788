"""Audit checks of the training step itself: loss, gradient norm, applied gradient, learning rate, updated weights, counts.

The expected side is the oracle's `StepTruth` (float64, its own loss and optimizer code); the
observed side is what the harness measured of the state it owns (`MeasuredStep`: weights before
and after, the optimizer's and scheduler's own counters, the learning rate) plus the metrics the
backend reported. Reported values are compared too, so a backend that trains right but reports
wrong (or the reverse) is named for what it got wrong. Tolerances: `Tolerances.for_dtype`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from compactsim.harness.audit.checks import FLOAT32_LOGGING_RTOL, Reporter, Tolerances, close
from compactsim.harness.audit.findings import Finding
from compactsim.harness.core import metrics as M
from compactsim.harness.core.training_state import MeasuredStep
from compactsim.harness.core.expectations import ExpectedTrainingStep as StepTruth


def _metric(metrics: Mapping[str, float | int], key: str) -> float | None:
    value = metrics.get(key)
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return math.nan


def check_counts_measured(report: Reporter, measured: MeasuredStep, metrics: Mapping[str, float | int],
                          truth: StepTruth | None = None) -> list[Finding]:
    """One optimizer update and one scheduler increment per logical batch, read from the state itself.

    The update may leave out a parameter no row reached (`StepTruth.unreached`: torch skips a None
    gradient; FSDP's and Megatron's buffers hand it a zero one); leaving out any other is a finding.
    Without the oracle's step (`truth` None) every skipped parameter is.
    """
    out: list[Finding] = []
    skipped = sorted(measured.skipped_parameters - (truth.unreached if truth is not None else frozenset()))
    if measured.optimizer_steps != 1:
        out.append(report("counts.optimizer", f"the optimizer's own step counter advanced by {measured.optimizer_steps} "
                          "during one logical batch's step (measured by the harness)", expected=1,
                          actual=measured.optimizer_steps))
    elif measured.optimizer_steps_uneven:
        out.append(report("counts.optimizer", "some parameters' optimizer step counters did not advance: the update "
                          "skipped parameters", expected="every parameter updated once", actual="uneven counters"))
    elif skipped and "in no param group" in (measured.after.moments_problem or "") \
            and len(measured.skipped_parameters) == len(measured.after.weights):
        # no policy parameter is in the optimizer (it steps copies: fp32 master weights, an offloaded shard): the
        # counters of the policy's own parameters never move, which says nothing about whether they were updated
        out.append(report("counts.optimizer", "the optimizer's param groups hold none of the policy's parameters (an "
                          "optimizer over master copies?): the audit reads each update from the optimizer's state of "
                          "the policy's own parameter objects, so this step cannot be audited; hand the backend's "
                          "state an optimizer over `state.policy.parameters()`", expected="an optimizer over the "
                          "policy's parameters", actual=measured.after.moments_problem, row=skipped[0]))
    elif skipped:
        out.append(report("counts.optimizer", f"the update skipped {len(skipped)} parameter tensor(s) that this step's "
                          f"rows reach (first: {skipped[0]!r}; their optimizer step counters did not advance): only a "
                          "parameter no row reaches may be left out", expected="every parameter a row reaches updated "
                          "once", actual=skipped[0], row=skipped[0]))
    if measured.scheduler_increments != 1:
        out.append(report("counts.scheduler", f"the LR scheduler's last_epoch advanced by {measured.scheduler_increments} "
                          "during one logical batch's step (measured by the harness)", expected=1,
                          actual=measured.scheduler_increments))
    for key, value in ((M.OPTIMIZER_STEPS, measured.optimizer_steps),
                       (M.SCHEDULER_INCREMENTS, measured.scheduler_increments)):
        reported = _metric(metrics, key)
        if reported is not None and reported != value:
            out.append(report("counts.reported", f"the backend reports {key} = {reported!r}; the harness measured "
                              f"{value}", expected=value, actual=reported))
    return out


def check_step_quantities(
    report: Reporter, truth: StepTruth, measured: MeasuredStep, metrics: Mapping[str, float | int], tol: Tolerances
) -> list[Finding]:
    """Loss and gradient norm (reported), learning rate (measured and reported) against the oracle."""
    out: list[Finding] = []
    lr = measured.lr
    if not close(lr, truth.lr, 0.0, tol.lr_rtol):
        out.append(report("train.lr", f"the optimizer stepped with learning rate {lr!r} (read from its param "
                          f"groups); the schedule gives {truth.lr!r} at step {truth.step}", expected=truth.lr, actual=lr))
    else:
        out += check_applied_lr(report, truth, measured, tol)
    for key, want, atol, rtol, what in (
        (M.LR, truth.lr, 0.0, tol.lr_rtol, "learning rate"),
        ("loss", truth.loss, tol.loss_atol, tol.loss_rtol, "loss"),
        (M.GRAD_NORM, truth.grad_norm, tol.grad_norm_atol, tol.grad_norm_rtol, "gradient norm (before clipping)"),
    ):
        got = _metric(metrics, key)
        if got is None:
            out.append(report("metric.missing", f"the step did not report {key}", expected=want, actual=None))
        elif not close(got, want, atol, rtol) and not (key == M.GRAD_NORM and _upstream_grad_norm(got, truth)):
            out.append(report(f"train.{'grad_norm' if key == M.GRAD_NORM else key}",
                              f"{what} {got!r}; the oracle computes {want!r} (|diff| {abs(got - want):.3g})",
                              expected=want, actual=got))
    return out


def _upstream_grad_norm(got: float, truth: StepTruth) -> bool:
    """A gradient norm as NeMo-RL's workers report it: computed or handed over in float32 (its DTensor and
    Megatron workers pass ``torch.tensor(grad_norm)``; the DTensor v1 worker and Automodel's ``clip_grad_norm``
    sum the squares in float32), so within `FLOAT32_LOGGING_RTOL` of the oracle's; or 0.0 when clipping is off,
    which Automodel's ``clip_grad_norm`` returns for ``max_grad_norm: None`` without computing a norm (the
    DTensor v2 worker logs it as it is)."""
    if truth.clip_coefficient is None and got == 0.0:
        return True
    return abs(got - truth.grad_norm) <= FLOAT32_LOGGING_RTOL * abs(truth.grad_norm)


def check_applied_lr(report: Reporter, truth: StepTruth, measured: MeasuredStep, tol: Tolerances) -> list[Finding]:
    """The rate the update itself used (`MeasuredStep.applied_lr`) is the schedule's.

    The param groups before the step can hold the right rate while the update uses another: a
    scheduler stepped before the optimizer, or a rate set by hand inside the step and put back.
    Only the weights tell; the finding names the rate they show and, when it is the one the param
    groups hold after the step, that the scheduler moved first.
    """
    applied = measured.applied_lr()
    if applied is None or abs(applied.lr - truth.lr) <= applied.bound + tol.lr_rtol * abs(truth.lr):
        return []
    later = measured.after.lrs[0] if measured.after.lrs else math.nan
    hint = ""
    if abs(applied.lr - later) <= applied.bound + tol.lr_rtol * abs(later):
        hint = (f": the rate the param groups hold after the step ({later!r}), so the scheduler stepped before the "
                "optimizer")
    return [report("train.lr", f"the update moved the weights by AdamW's step at learning rate {applied.lr:.10g} "
                   f"(±{applied.bound:.2g}, measured from the weights and moments before and after it){hint}; the "
                   f"schedule gives {truth.lr!r} at step {truth.step}", expected=truth.lr, actual=applied.lr)]


#: Loss metrics a backend may report, each compared with the oracle's value when present:
#: (metric key, `StepTruth` attribute, exact count or not). Floats use the loss tolerances, and an infinite
#: value on either side (the +inf/-inf of a min/max over no trained token) matches only by equality.
#: Formulas and aggregation: nemo-rl-semantics.md §4.6, `compactsim.harness.oracle.step_metrics`.
REPORTED_LOSS_METRICS: tuple[tuple[str, str, bool], ...] = (
    ("actor_loss", "actor_loss", False),
    ("kl_penalty", "kl_penalty", False),
    (M.TOKEN_MULT_PROB_ERROR, "token_mult_prob_error", False),
    (M.GLOBAL_VALID_TOKENS, "global_valid_tokens", True),
    (M.GLOBAL_VALID_SEQS, "global_valid_seqs", True),
    ("probs_ratio", "probs_ratio", False),
    ("probs_ratio_clamped", "probs_ratio_clamped", False),
    ("probs_ratio_min", "probs_ratio_min", False),
    ("probs_ratio_max", "probs_ratio_max", False),
    ("probs_ratio_clamped_min", "probs_ratio_clamped_min", False),
    ("probs_ratio_clamped_max", "probs_ratio_clamped_max", False),
    ("gen_kl_error", "gen_kl_error", False),
    ("policy_kl_error", "policy_kl_error", False),
    ("js_divergence_error", "js_divergence_error", False),
    ("sampling_importance_ratio", "sampling_importance_ratio", False),
    ("approx_entropy", "approx_entropy", False),
    ("is_oob_ratio", "is_oob_ratio", False),
    ("num_valid_samples", "num_valid_samples", True),
)

#: Every step-metric key the audit compares, with the finding that names a wrong value. Batch metrics
#: are compared with the oracle's exact values (`metric.exact`, `compactsim.harness.oracle.expect.exact_batch_metrics`).
AUDITED_METRICS: dict[str, str] = {
    **{key: "train.metric" for key, _, _ in REPORTED_LOSS_METRICS},
    "loss": "train.loss",
    M.GRAD_NORM: "train.grad_norm",
    M.LR: "train.lr",
    M.OPTIMIZER_STEPS: "counts.reported",
    M.SCHEDULER_INCREMENTS: "counts.reported",
    M.OPTIMIZER_STEP_COUNT: "counts.optimizer",
    M.SCHEDULER_STEP_COUNT: "counts.scheduler",
    # the version the step trained: checked by the runner against state.version before the step
    M.TRAINED_POLICY_VERSION: "backend.error",
    # NeMo-RL's driver metric, when a backend reports it (`checks.check_reported_reward`)
    M.REWARD: "train.metric",
    **{key: "metric.exact" for key in M.BATCH_METRIC_KEYS},
}

#: Step-metric keys a backend may report that the audit deliberately does not compare, with why, so a
#: new metric cannot go unaudited unnoticed (tests/unit/audit/test_metric_coverage.py).
UNAUDITED_METRICS: dict[str, str] = {
    "positive_nll_loss": "NeMo-RL's positive-example NLL term (weight positive_example_nll_weight, 0 by default): "
    "the reference does not state its normalisation and no scenario sets the weight; a nonzero weight shows in "
    "train.loss and train.update",
    "filtered_reward": "NeMo-RL's reward after its dynamic-sampling filter, which physical-trace training does not run; "
    "the reference states no value for it here",
    "mean_prompt_length": "NeMo-RL's mean first-turn prompt length (input_message_log[0]); under compaction the "
    "reference does not say whether it is per logical rollout or per physical row",
    "mean_gen_tokens_per_sample": "NeMo-RL's mean generated tokens per sample; under compaction the reference does not "
    "say whether a sample is a logical rollout or a physical row (the trained-token counts are audited exactly: "
    "global_valid_toks, eligible_action_tokens)",
    "wd": "the weight decay NeMo-RL's workers log from one param group (which one is worker-specific, and Megatron's "
    "no-decay groups log 0); the decay AdamW applied is measured per parameter by train.update",
}
#: Key prefixes never audited: wall-clock seconds, and `compactsim train`'s async bookkeeping (not a suite run).
UNAUDITED_PREFIXES: dict[str, str] = {
    M.TIMING_PREFIX: "wall-clock seconds, not a function of the inputs",
    "baseline_reward/": "NeMo-RL's share of prompts whose rewards are all 0, all 1 or mixed: its thresholds on "
    "non-binary rewards are not stated in the reference",
    "async/": "the async replay buffer's bookkeeping in `compactsim train` (ages, evictions); the suite's async "
    "scenarios are audited through their rows' policy versions and the importance-weighted loss",
}


def metric_audit(key: str) -> str | None:
    """The finding that audits step metric `key`, or None when it is deliberately not audited (or unknown)."""
    return AUDITED_METRICS.get(key)


def is_unaudited(key: str) -> bool:
    """`key` is listed as deliberately not audited (by name or by prefix)."""
    return key in UNAUDITED_METRICS or any(key.startswith(p) for p in UNAUDITED_PREFIXES)


#: NeMo-RL's driver logs a `_min`/`_max` over no value at all as this (nemo-rl-semantics §3.7).
DRIVER_EMPTY_EXTREMUM = -1.0


def _matches(key: str, got: float, want: float, atol: float, rtol: float) -> bool:
    """Within tolerance; an infinite value on either side only by equality (inf − inf is NaN, not 0).

    A step with no trained token has `_min`/`_max` of +inf/−inf as the worker combines them, and
    −1.0 as NeMo-RL's driver logs them; a backend may report either.
    """
    if math.isinf(want) and key.endswith(("_min", "_max")) and got == DRIVER_EMPTY_EXTREMUM:
        return True
    if math.isinf(want) or math.isinf(got):
        return got == want
    return close(got, want, atol, rtol)


def check_reported_loss_metrics(
    report: Reporter, truth: StepTruth, metrics: Mapping[str, float | int], tol: Tolerances
) -> list[Finding]:
    """The loss's own metrics, when the backend reports them: a trainer that trains right but logs wrong is named.

    Counts (`global_valid_toks`, `global_valid_seqs`, `num_valid_samples`) are exact; the rest use the
    loss tolerances, `_min`/`_max` with ±inf (a step without trained tokens) matched exactly or by the
    driver's −1.0.
    `is_oob_ratio` is judged only under truncated importance sampling, where it is defined.
    """
    out: list[Finding] = []
    for key, attr, exact in REPORTED_LOSS_METRICS:
        got = _metric(metrics, key)
        want_value = getattr(truth, attr)
        if got is None or want_value is None:
            continue
        want = float(want_value)
        ok = got == want if exact else _matches(key, got, want, tol.loss_atol, tol.loss_rtol)
        if not ok:
            out.append(report("train.metric", f"{key} = {got!r}; the oracle computes {want!r} for this step's rows",
                              expected=want, actual=got))
    return out


def check_continuity(report: Reporter, previous: MeasuredStep, current: MeasuredStep) -> list[Finding]:
    """A step starts from the state the previous step left: same weights, optimizer counters and scheduler epoch.

    The oracle judges each step from the weights the harness measured before it, so a trainer that
    silently reloads stale weights (or resets its scheduler) between steps would otherwise pass every
    step on its own; this names the step where the state jumped.
    """
    before, after = current.before, previous.after
    changed = sorted(n for n, w in before.weights.items()
                     if n not in after.weights or not torch.equal(w, after.weights[n]))
    changed += sorted(set(after.weights) - set(before.weights))
    out: list[Finding] = []
    if changed:
        out.append(report("train.continuity", f"{len(changed)} parameter tensor(s) changed between the end of the "
                          f"previous step and the start of this one (first: {changed[0]!r}): the step did not start "
                          "from the weights the last update produced", expected="the previous step's weights",
                          actual=changed[0], row=changed[0]))
    if before.first_moments is not None and after.first_moments is not None:
        moved = sorted(n for n, m in before.first_moments.items()
                       if n not in after.first_moments or not torch.equal(m, after.first_moments[n]))
        if moved:
            out.append(report("train.continuity", f"the optimizer's first moment of {len(moved)} parameter tensor(s) "
                              f"changed between the end of the previous step and the start of this one (first: "
                              f"{moved[0]!r}): the optimizer state was reset or replaced", expected="the previous "
                              "step's moments", actual=moved[0], row=moved[0]))
    counters = (("optimizer step counter", after.optimizer_step_max, before.optimizer_step_max),
                ("scheduler last_epoch", after.scheduler_epoch, before.scheduler_epoch))
    for what, was, now in counters:
        if was != now:
            out.append(report("train.continuity", f"the {what} was {was} after the previous step and {now} before "
                              "this one", expected=was, actual=now))
    if after.optimizer_step_max == before.optimizer_step_max and after.steps_by_param and before.steps_by_param:
        reset = sorted(n for n, k in before.steps_by_param.items() if after.steps_by_param.get(n, k) != k)
        if reset:
            name = reset[0]
            out.append(report("train.continuity", f"the optimizer step counter of {len(reset)} parameter tensor(s) "
                              f"changed between the end of the previous step and the start of this one (first: "
                              f"{name!r})", expected=after.steps_by_param[name], actual=before.steps_by_param[name],
                              row=name))
    return out


def check_gradient(report: Reporter, truth: StepTruth, measured: MeasuredStep, tol: Tolerances) -> list[Finding]:
    """The gradient the optimizer applied equals the oracle's all-reduced, clipped gradient.

    Measured, not reported: read back from AdamW's first moment (`MeasuredStep.applied_gradient`).
    The update check alone cannot see a gradient's scale: Adam divides it by its own magnitude (the
    first update is ~lr·sign(g)), so a gradient applied 1.5x too large, clipped twice or averaged
    over the wrong rank count moves float32 weights exactly as the right one would. Two bounds,
    either failing is the finding: each entry (`gradient_atol`, `gradient_rtol` of its tensor's
    largest entry, plus the moments' rounding) and the whole model (`gradient_norm_rtol`).
    """
    expected = truth.clipped_gradient
    applied = measured.applied_gradient()
    problem = measured.after.moments_problem or measured.before.moments_problem
    if expected is not None and applied is None and problem is not None:
        # silence here would pass a gradient applied at any scale: Adam divides the scale out of the update
        return [report("train.gradient", f"the gradient the optimizer applied cannot be read back: {problem}. The "
                       "audit reads it, and the learning rate the update used, from torch's AdamW state, so a backend "
                       "must step an optimizer that keeps it (README: what a backend's train_step must do)",
                       expected="AdamW state: step, exp_avg, exp_avg_sq per parameter", actual=problem, row=None)]
    if expected is None or applied is None:
        return []  # not one update: counts.* and train.update speak for the step
    scale = _float32_clip_scale(truth, expected, applied)
    if scale != 1.0:
        expected = {name: want * scale for name, want in expected.items()}
    off: list[tuple[float, str, float, float]] = []  # (max |diff|, name, expected, applied) per tensor off its bound
    largest: tuple[float, str, float, float] = (-1.0, "", 0.0, 0.0)
    dot = norm2 = diff2 = 0.0
    for name in sorted(expected):
        want = expected[name]
        got = applied.get(name)
        if got is None or tuple(got[0].shape) != tuple(want.shape):
            return []  # a missing or reshaped parameter is train.update's finding
        if not want.numel():
            continue
        g, reading_error = got
        diff = (g - want).abs()
        excess = diff - (tol.gradient_atol + tol.gradient_rtol * float(want.abs().max()) + reading_error)
        i = int(torch.argmax(torch.nan_to_num(excess, nan=math.inf)))
        entry = (float(diff.max()), name, float(want.flatten()[i]), float(g.flatten()[i]))
        largest = max(largest, entry)
        if bool((excess > 0).any()) or not bool(torch.isfinite(g).all()):
            off.append(entry)
        dot += float((g * want).sum())
        norm2 += float((want * want).sum())
        diff2 += float((diff * diff).sum())
    # A relative error needs a nonzero expected gradient. Where the oracle's is exactly zero everywhere (every
    # advantage 0 and the KL term at its minimum: ref == policy), a trainer's rounding (its reference logprobs from
    # another batch layout than its training forward, say) leaves entries of ~1e-20 that no relative measure can
    # judge; each entry's own absolute bound (gradient_atol plus the reading error) is then the whole check.
    relative = math.sqrt(diff2 / norm2) if norm2 > 0 else None
    if not off and (relative is None or not relative > tol.gradient_norm_rtol):
        return _second_moment_finding(report, measured)
    max_diff, name, want_v, got_v = max(off) if off else largest
    if measured.moments_agree() is False:
        return [report("train.continuity", "AdamW's first and second moments do not agree on one gradient for this "
                       "step: the optimizer state did not continue from the previous step's (reset or replaced during "
                       "the step), so the applied gradient cannot be read", expected="moments advanced by one update",
                       actual="moments that disagree", row=name)]
    ratio = f"; overall the applied gradient is {dot / norm2:.6g}x the expected one" if norm2 > 0 else ""
    whole = "undefined (the oracle's gradient is exactly zero)" if relative is None else f"{relative:.3g}"
    return [report("train.gradient", f"{len(off)} of {len(expected)} parameter tensors off their bound, whole-model "
                   f"relative error {whole}: the gradient the optimizer applied (read from AdamW's first "
                   f"moment) differs from the oracle's clipped gradient; worst {name!r}, max |diff| "
                   f"{max_diff:.3g}{ratio}", expected=want_v, actual=got_v, row=name)]


def _float32_clip_scale(truth: StepTruth, expected: Mapping[str, torch.Tensor],
                        applied: Mapping[str, tuple[torch.Tensor, Any]]) -> float:
    """1, or, where clipping bound, the factor within `FLOAT32_LOGGING_RTOL` of 1 that best maps the oracle's
    clipped gradient onto the applied one (least squares over the whole model).

    A clip coefficient max_norm / (‖g‖ + 1e-6) taken from a float32 norm (NeMo-RL's DTensor v1 worker, Automodel's
    ``clip_grad_norm``) scales every entry by the same factor within that bound of the oracle's, which the float64
    per-entry and whole-model bounds would call a wrong gradient. Any other error is not a common factor this
    close to 1 and is still judged at full precision, after the rescaling.
    """
    if truth.clip_coefficient is None or truth.clip_coefficient >= 1.0:
        return 1.0
    dot = norm2 = 0.0
    for name, want in expected.items():
        got = applied.get(name)
        if got is None or tuple(got[0].shape) != tuple(want.shape):
            return 1.0
        dot += float((got[0].to(want.dtype) * want).sum())
        norm2 += float((want * want).sum())
    if not norm2 > 0 or not math.isfinite(dot):
        return 1.0
    scale = dot / norm2
    return scale if abs(scale - 1.0) <= FLOAT32_LOGGING_RTOL else 1.0


def _second_moment_finding(report: Reporter, measured: MeasuredStep) -> list[Finding]:
    """A right applied gradient whose square the second moment did not take in with its group's β2.

    The first moment was right, so the gradient was; the update's check cannot always see the
    second moment (Adam's first update does not depend on it), yet every later step divides by it.
    """
    bad = measured.moments_disagreement()
    if bad is None:
        return []
    return [report("train.continuity", f"AdamW's second moment of {bad.name!r} did not advance as v ← β2·v + (1 − β2)·g² "
                   "with its param group's β2 and the gradient its first moment applied (which matches the oracle's): "
                   "the second moment was reset or replaced during the step, or advanced with another β2",
                   expected=bad.from_first_moment, actual=bad.from_second_moment, row=bad.name)]


def _undetermined_step(truth: StepTruth, name: str, tol: Tolerances) -> torch.Tensor | float:
    """Per entry, the part of Adam's step (in units of lr) that the gradient's own tolerance leaves open.

    Adam moves an entry by about lr·s with s = m̂/(√v̂ + ε), |s| ≲ 1; on the first step s = g/(|g| + ε).
    Where the expected gradient g is no larger than the gradient check's bound δ (`check_gradient`:
    gradient_atol + gradient_rtol·max |g| over the tensor), a trainer in a lower precision may get
    its sign either way and s anywhere in [-1, 1]: up to 2 lr apart. Elsewhere two gradients δ apart
    give steps at most 2δ/|g| apart. So an entry may differ by lr·min(2, 2δ/|g|) more than the flat
    bound; a missing, doubled or mis-scaled update still shows on every entry whose gradient is clear.
    """
    grads = truth.clipped_gradient
    g = grads.get(name) if grads is not None else None
    if g is None or not g.numel():
        return 0.0
    g = g.abs()
    delta = tol.gradient_atol + tol.gradient_rtol * float(g.max())
    return truth.lr * torch.clamp(2.0 * delta / g, max=2.0)  # g = 0 -> inf -> 2


def _settled_entries(truth: StepTruth, measured: MeasuredStep) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Per parameter, (mask, expected weights) of the entries whose step nothing leaves open.

    Where the oracle's gradient is exactly zero (an embedding row of a token no row holds, an expert
    no token reached: zero in every precision) and the gradient the optimizer applied reads as zero
    too (within its reading error), the step is decay and momentum alone, determined by the moments
    the optimizer holds (`MeasuredStep.own_moment_update` at the oracle's rate and decay): a trainer in a
    lower precision may carry other moments than the oracle from earlier steps, but must move each
    such entry as its own moments say. `_undetermined_step`'s allowance would otherwise hide a row
    left unupdated (lazy, row-sparse Adam) or undecayed (decay applied only where the gradient is).
    """
    grads, applied = truth.clipped_gradient, measured.applied_gradient()
    readable = grads is not None and applied is not None and truth.weight_decays
    own = measured.own_moment_update(truth.lr, truth.weight_decays) if readable else None
    if own is None:
        return {}
    out: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for name, want in own.items():
        g, reading = grads.get(name), applied.get(name)
        if g is None or reading is None or g.shape != want.shape or reading[0].shape != want.shape:
            continue
        mask = (g == 0) & (reading[0].abs() <= reading[1])
        if bool(mask.any()):
            out[name] = (mask, want)
    return out


def _adam_settings_finding(report: Reporter, truth: StepTruth, measured: MeasuredStep) -> list[Finding]:
    """Every parameter group holds the oracle's (β1, β2) and ε, read from the optimizer itself before and after the step.

    The weights cannot always show these: bias correction makes the first update independent of β2, and in
    float32 the update's tolerance on entries with small gradients is wider than what ε = 1e-6 for 1e-8 moves.
    """
    for when, snap in (("before", measured.before), ("after", measured.after)):
        for name in sorted(snap.moment_settings):
            b1, b2, _ = snap.moment_settings[name]
            if (b1, b2) != tuple(truth.adam_betas):
                return [report("train.update", f"the optimizer's param group of {name!r} holds betas ({b1!r}, {b2!r}) "
                               f"{when} the step; the oracle's AdamW uses {tuple(truth.adam_betas)!r}",
                               expected=list(truth.adam_betas), actual=[b1, b2], row=name)]
        if snap.update_rule_problem is not None:
            return [report("train.update", f"{snap.update_rule_problem} {when} the step; the oracle's is torch's AdamW "
                           "(amsgrad off)", expected="AdamW", actual=snap.update_rule_problem, row=None)]
        for name in sorted(snap.update_rule or {}):
            eps = snap.update_rule[name][0]  # type: ignore[index]
            if eps != truth.adam_eps:
                return [report("train.update", f"the optimizer's param group of {name!r} holds eps {eps!r} {when} the "
                               f"step; the oracle's AdamW uses {truth.adam_eps!r}", expected=truth.adam_eps, actual=eps,
                               row=name)]
    return []


def check_update(report: Reporter, truth: StepTruth, measured: MeasuredStep, tol: Tolerances) -> list[Finding]:
    """Every parameter tensor after the step equals the oracle's AdamW update (max |diff| per tensor), and the
    optimizer's param groups hold the oracle's betas and eps (`_adam_settings_finding`).

    Bound per entry: update_atol + update_lr_fraction·lr + update_rtol·|expected update| + weight_rtol·|expected
    weight| (the weight's own rounding) + the step the gradient's tolerance leaves open (`_undetermined_step`),
    except on entries no gradient reached, where the optimizer's own moments settle the step (`_settled_entries`).
    """
    settings = _adam_settings_finding(report, truth, measured)
    if settings:
        return settings
    worst: list[tuple[float, str, float, float]] = []
    after = measured.after.weights
    settled = _settled_entries(truth, measured)
    for name in sorted(truth.params_after):
        want = truth.params_after[name]
        got = after.get(name)
        if got is None or tuple(got.shape) != tuple(want.shape):
            return [report("train.update", f"parameter {name!r} is missing or changed shape after the step",
                           expected=list(want.shape), actual=None if got is None else list(got.shape))]
        open_step = _undetermined_step(truth, name, tol)
        if name in settled:
            mask, own = settled[name]
            want = torch.where(mask, own, want)
            open_step = torch.where(mask, torch.zeros_like(want), open_step)
        diff = (got.to(torch.float64) - want).abs()
        atol = tol.update_atol + tol.update_lr_fraction * truth.lr
        bound = (atol + tol.update_rtol * (want - measured.before.weights[name]).abs() + tol.weight_rtol * want.abs()
                 + open_step)
        excess = diff - bound
        if bool((excess > 0).any()) or not bool(torch.isfinite(got).all()):
            i = int(torch.argmax(torch.nan_to_num(excess, nan=math.inf)))
            worst.append((float(diff.max()), name, float(want.flatten()[i]), float(got.flatten()[i])))
    if not worst:
        return []
    worst.sort(key=lambda w: -w[0])
    max_diff, name, want_v, got_v = worst[0]
    moved = sum(float((measured.after.weights[n] - measured.before.weights[n]).abs().max()) for n in truth.params_after)
    still = " (no parameter moved at all: the update was never applied)" if moved == 0.0 else ""
    return [report("train.update", f"{len(worst)} of {len(truth.params_after)} parameter tensors differ from the "
                   f"oracle's AdamW update; worst {name!r}, max |diff| {max_diff:.3g}{still}",
                   expected=want_v, actual=got_v, row=name)]


__all__ = [
    "AUDITED_METRICS",
    "REPORTED_LOSS_METRICS",
    "UNAUDITED_METRICS",
    "UNAUDITED_PREFIXES",
    "check_applied_lr",
    "check_continuity",
    "check_counts_measured",
    "check_gradient",
    "check_reported_loss_metrics",
    "check_step_quantities",
    "check_update",
    "is_unaudited",
    "metric_audit",
]
