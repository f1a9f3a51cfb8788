"""The audit of the training step: harness-measured counts, learning rate, loss, gradient norm and update."""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from compactsim.harness.audit.checks import Reporter, Tolerances
from compactsim.harness.audit.training_checks import (
    check_continuity,
    check_counts_measured,
    check_reported_loss_metrics,
    check_step_quantities,
    check_update,
)
from compactsim.harness.core.expectations import ExpectedTrainingStep
from compactsim.harness.core.training_state import MeasuredStep, TrainingSnapshot

REPORT = Reporter("s", 0, "compactsim run s --seed 0")
BEFORE = {"w": torch.zeros(2, 2, dtype=torch.float64), "b": torch.zeros(3, dtype=torch.float64)}
AFTER = {"w": torch.full((2, 2), -1e-3, dtype=torch.float64), "b": torch.full((3,), 1e-3, dtype=torch.float64)}


def _snap(weights, *, step_min: int, step_max: int, epoch: int, lr: float = 1e-3) -> TrainingSnapshot:
    return TrainingSnapshot(weights=weights, model_config=None, lrs=(lr,), optimizer_step_min=step_min,
                            optimizer_step_max=step_max, scheduler_epoch=epoch)


def _measured(after=AFTER, *, steps=(1, 1), epoch=1, lr=1e-3) -> MeasuredStep:
    return MeasuredStep(_snap(BEFORE, step_min=0, step_max=0, epoch=0, lr=lr),
                        _snap(after, step_min=steps[0], step_max=steps[1], epoch=epoch))


LOSS_METRICS = {"probs_ratio": 1.0, "probs_ratio_clamped": 1.0, "probs_ratio_min": 1.0, "probs_ratio_max": 1.0,
                "probs_ratio_clamped_min": 1.0, "probs_ratio_clamped_max": 1.0, "gen_kl_error": 0.02,
                "policy_kl_error": 0.03, "js_divergence_error": 0.004, "sampling_importance_ratio": 0.9,
                "approx_entropy": 0.7, "is_oob_ratio": None, "num_valid_samples": 3.0}
TRUTH = ExpectedTrainingStep(step=0, loss=0.5, actor_loss=0.5, kl_penalty=0.0, grad_norm=2.0, lr=1e-3,
                             global_valid_tokens=10.0, global_valid_seqs=3.0, token_mult_prob_error=1.0,
                             **LOSS_METRICS, params_after=AFTER)
GOOD = {"loss": 0.5, "grad_norm": 2.0, "lr": 1e-3}


def test_a_correct_step_has_no_finding():
    m = _measured()
    assert check_counts_measured(REPORT, m, {}) == []
    assert check_step_quantities(REPORT, TRUTH, m, GOOD, Tolerances()) == []
    assert check_update(REPORT, TRUTH, m, Tolerances()) == []


def test_counts_come_from_the_state_and_a_contradicting_report_is_named():
    [opt, sched, reported] = check_counts_measured(REPORT, _measured(steps=(3, 3), epoch=2),
                                                   {"physical_trace_training/optimizer_steps": 1})
    assert (opt.check, opt.expected, opt.actual) == ("counts.optimizer", 1, 3)
    assert (sched.check, sched.expected, sched.actual) == ("counts.scheduler", 1, 2)
    assert (reported.check, reported.expected, reported.actual) == ("counts.reported", 3, 1.0)


def test_an_update_that_skipped_parameters_is_uneven():
    [f] = check_counts_measured(REPORT, _measured(steps=(0, 1)), {})
    assert (f.check, f.actual) == ("counts.optimizer", "uneven counters")


def _counted(before: dict[str, int], after: dict[str, int], *, moments: tuple[dict, dict] | None = None) -> MeasuredStep:
    """A step whose snapshots carry per-parameter counters (and, optionally, first moments)."""
    def snap(weights, counts, epoch, first):
        settings = {n: (0.9, 0.999, 2.2e-16) for n in weights} if first is not None else {}
        return replace(_snap(weights, step_min=min(counts.values()), step_max=max(counts.values()), epoch=epoch),
                       steps_by_param=counts, first_moments=first, moment_settings=settings)
    m_before, m_after = moments if moments is not None else (None, None)
    return MeasuredStep(snap(BEFORE, before, 0, m_before), snap(AFTER, after, 1, m_after))


def test_an_update_may_leave_out_only_parameters_no_row_reached():
    """torch's AdamW skips a parameter whose `.grad` is None (a plain loop leaves it so where no row reached
    it); the oracle's `unreached` says where that is allowed, and the finding names any other."""
    m = _counted({"w": 4, "b": 3}, {"w": 5, "b": 3})
    assert (m.optimizer_steps, m.skipped_parameters, m.optimizer_steps_uneven) == (1, frozenset({"b"}), False)
    assert check_counts_measured(REPORT, m, {}, replace(TRUTH, unreached=frozenset({"b"}))) == []
    [f] = check_counts_measured(REPORT, m, {}, replace(TRUTH, unreached=frozenset({"w"})))
    assert (f.check, f.row, f.actual) == ("counts.optimizer", "b", "b")
    assert "the update skipped 1 parameter tensor(s) that this step's rows reach" in f.message
    [g] = check_counts_measured(REPORT, m, {})  # no oracle step: nothing says b was out of reach
    assert (g.check, g.row) == ("counts.optimizer", "b")
    [h] = check_counts_measured(REPORT, _counted({"w": 0, "b": 0}, {"w": 1, "b": 2}), {}, TRUTH)
    assert (h.check, h.expected, h.actual) == ("counts.optimizer", 1, 2)
    [u] = check_counts_measured(REPORT, _counted({"w": 0, "b": 0, "c": 0}, {"w": 0, "b": 1, "c": 3}), {}, TRUTH)
    assert (u.check, u.expected, u.actual) == ("counts.optimizer", 1, 3)


def test_a_skipped_parameter_applied_a_zero_gradient_when_its_moment_stayed():
    m0 = {"w": torch.full((2, 2), 0.5, dtype=torch.float64), "b": torch.full((3,), 0.25, dtype=torch.float64)}
    m1 = {"w": m0["w"] * 0.9 + 0.1 * 2.0, "b": m0["b"].clone()}
    applied = _counted({"w": 1, "b": 1}, {"w": 2, "b": 1}, moments=(m0, m1)).applied_gradient()
    assert applied is not None
    assert torch.allclose(applied["w"][0], torch.full((2, 2), 2.0, dtype=torch.float64), atol=1e-14)
    assert torch.equal(applied["b"][0], torch.zeros(3, dtype=torch.float64))
    moved = {"w": m1["w"], "b": m0["b"] * 0.9}
    assert _counted({"w": 1, "b": 1}, {"w": 2, "b": 1}, moments=(m0, moved)).applied_gradient() is None


def test_a_parameters_own_counter_reset_between_steps_breaks_continuity():
    first = _counted({"w": 0, "b": 0}, {"w": 2, "b": 1})

    def starting_with(counts: dict[str, int]) -> MeasuredStep:
        return MeasuredStep(replace(first.after, steps_by_param=counts), first.after)

    [f] = check_continuity(REPORT, first, starting_with({"w": 2, "b": 0}))
    assert (f.check, f.row, f.expected, f.actual) == ("train.continuity", "b", 1, 0)
    assert check_continuity(REPORT, first, starting_with({"w": 2, "b": 1})) == []


def test_learning_rate_loss_and_grad_norm_are_compared_with_the_oracle():
    findings = check_step_quantities(REPORT, TRUTH, _measured(lr=2e-3), {"loss": 0.25, "grad_norm": 2.0 + 1e-3, "lr": 2e-3},
                                     Tolerances())
    assert [(f.check, f.expected, f.actual) for f in findings] == [
        ("train.lr", 1e-3, 2e-3), ("train.lr", 1e-3, 2e-3), ("train.loss", 0.5, 0.25), ("train.grad_norm", 2.0, 2.0 + 1e-3)]
    [missing] = check_step_quantities(REPORT, TRUTH, _measured(), {"loss": 0.5, "lr": 1e-3}, Tolerances())
    assert (missing.check, missing.message) == ("metric.missing", "the step did not report grad_norm")


def test_a_grad_norm_as_nemo_rls_workers_report_it_passes():
    """Handed over or summed in float32 (within 2^-16 relative), or Automodel's 0.0 when clipping is off; a 0.0 where
    clipping is on, or a norm 5e-5 off, is still a finding."""
    clipping = replace(TRUTH, clip_coefficient=0.5)
    for truth in (TRUTH, clipping):
        for norm in (float(torch.tensor(2.0 + 3e-7, dtype=torch.float32)), 2.0 * (1 + 1.5e-5)):
            assert check_step_quantities(REPORT, truth, _measured(), {**GOOD, "grad_norm": norm}, Tolerances()) == []
        [f] = check_step_quantities(REPORT, truth, _measured(), {**GOOD, "grad_norm": 2.0 * (1 + 5e-5)}, Tolerances())
        assert f.check == "train.grad_norm"
    assert check_step_quantities(REPORT, TRUTH, _measured(), {**GOOD, "grad_norm": 0.0}, Tolerances()) == []
    [f] = check_step_quantities(REPORT, clipping, _measured(), {**GOOD, "grad_norm": 0.0}, Tolerances())
    assert (f.check, f.expected, f.actual) == ("train.grad_norm", 2.0, 0.0)


def test_update_finding_names_the_worst_tensor_and_says_when_nothing_moved():
    off = {"w": AFTER["w"].clone(), "b": AFTER["b"] + torch.tensor([0.0, 5e-4, 0.0], dtype=torch.float64)}
    [f] = check_update(REPORT, TRUTH, _measured(off), Tolerances())
    assert (f.check, f.row, f.expected, f.actual) == ("train.update", "b", 1e-3, 1.5e-3)
    assert "1 of 2 parameter tensors" in f.message and "never applied" not in f.message
    [still] = check_update(REPORT, TRUTH, _measured(BEFORE), Tolerances())
    assert "2 of 2 parameter tensors" in still.message and "the update was never applied" in still.message


def test_update_tolerance_is_relative_to_the_expected_update_in_low_precision():
    tol = Tolerances.for_dtype("float32")
    near = {k: v * (1 + 1e-4) for k, v in AFTER.items()}  # 0.01% of the update: float32 rounding
    assert check_update(REPORT, TRUTH, _measured(near), tol) == []
    assert check_update(REPORT, TRUTH, _measured(near), Tolerances()) != []  # float64 is exact


def test_an_entry_whose_gradient_is_inside_its_tolerance_may_take_adams_step_either_way():
    """float32: a gradient of ~0 (within the gradient check's bound) may round to either sign, and Adam's
    sign-like first step then lands up to 2·lr away; that entry is not a finding, while the same
    flip on an entry with a clear gradient, or 1% of lr on every entry, still is."""
    tol = Tolerances.for_dtype("float32")
    grads = {"w": torch.tensor([[1.0, 1e-6], [0.5, -0.25]], dtype=torch.float64), "b": torch.ones(3, dtype=torch.float64)}
    truth = replace(TRUTH, clipped_gradient=grads)
    flipped = {"w": AFTER["w"].clone(), "b": AFTER["b"].clone()}
    flipped["w"][0, 1] = 1e-3  # expected -1e-3: the step went the other way where g = 1e-6 (bound 1e-3·max|g|)
    assert check_update(REPORT, truth, _measured(flipped), tol) == []
    clear = {"w": AFTER["w"].clone(), "b": AFTER["b"].clone()}
    clear["w"][1, 1] = 1e-3  # the same flip where g = -0.25: Adam's step there is set
    [f] = check_update(REPORT, truth, _measured(clear), tol)
    assert (f.check, f.row, f.expected, f.actual) == ("train.update", "w", -1e-3, 1e-3)
    scaled = {k: v * 1.01 for k, v in AFTER.items()}  # every step 1% of lr long (the flat bound is 0.1% of lr)
    [f] = check_update(REPORT, truth, _measured(scaled), tol)
    assert "2 of 2 parameter tensors" in f.message
    assert check_update(REPORT, TRUTH, _measured(flipped), tol) != []  # no gradient known: no entry is excused


def test_reported_loss_metrics_are_compared_when_present_and_counts_exactly():
    assert check_reported_loss_metrics(REPORT, TRUTH, {}, Tolerances()) == []  # nothing reported, nothing to judge
    right = {"actor_loss": 0.5, "kl_penalty": 0.0, "token_mult_prob_error": 1.0 + 1e-13,
             "global_valid_toks": 10, "global_valid_seqs": 3.0}
    assert check_reported_loss_metrics(REPORT, TRUTH, right, Tolerances()) == []
    wrong = {"actor_loss": 0.6, "kl_penalty": 0.01, "token_mult_prob_error": 1.5,
             "global_valid_toks": 10.000001, "global_valid_seqs": 4}
    findings = check_reported_loss_metrics(REPORT, TRUTH, wrong, Tolerances())
    assert [(f.check, f.expected, f.actual) for f in findings] == [
        ("train.metric", 0.5, 0.6), ("train.metric", 0.0, 0.01), ("train.metric", 1.0, 1.5),
        ("train.metric", 10.0, 10.000001), ("train.metric", 3.0, 4.0)]
    assert findings[0].message == "actor_loss = 0.6; the oracle computes 0.5 for this step's rows"


def test_a_step_must_start_where_the_previous_one_ended():
    first = _measured()
    same = MeasuredStep(_snap(AFTER, step_min=1, step_max=1, epoch=1), _snap(AFTER, step_min=2, step_max=2, epoch=2))
    assert check_continuity(REPORT, first, same) == []
    reloaded = MeasuredStep(_snap(BEFORE, step_min=1, step_max=1, epoch=0), _snap(AFTER, step_min=2, step_max=2, epoch=1))
    weights, epoch = check_continuity(REPORT, first, reloaded)
    assert (weights.check, weights.row) == ("train.continuity", "b")
    assert weights.message.startswith("2 parameter tensor(s) changed between the end of the previous step")
    assert (epoch.check, epoch.expected, epoch.actual) == ("train.continuity", 1, 0)


def test_every_loss_diagnostic_is_compared_when_reported_and_counts_exactly():
    right = {k: v for k, v in LOSS_METRICS.items() if v is not None}
    assert check_reported_loss_metrics(REPORT, TRUTH, {**right, "probs_ratio": 1.0 + 1e-12}, Tolerances()) == []
    wrong = {"probs_ratio": 1.1, "sampling_importance_ratio": 0.0596, "gen_kl_error": 0.02 + 1e-6,
             "approx_entropy": 0.7, "num_valid_samples": 3.0000001}
    findings = check_reported_loss_metrics(REPORT, TRUTH, wrong, Tolerances())
    assert [(f.message.split(" = ")[0], f.expected, f.actual) for f in findings] == [
        ("probs_ratio", 1.0, 1.1), ("gen_kl_error", 0.02, 0.02 + 1e-6),
        ("sampling_importance_ratio", 0.9, 0.0596), ("num_valid_samples", 3.0, 3.0000001)]
    assert {f.check for f in findings} == {"train.metric"}


def test_extrema_of_an_empty_step_match_the_same_infinity_or_the_drivers_minus_one():
    empty = replace(TRUTH, probs_ratio_min=math.inf, probs_ratio_max=-math.inf)
    assert check_reported_loss_metrics(REPORT, empty, {"probs_ratio_min": math.inf, "probs_ratio_max": -math.inf},
                                       Tolerances()) == []
    assert check_reported_loss_metrics(REPORT, empty, {"probs_ratio_min": -1.0, "probs_ratio_max": -1.0},
                                       Tolerances()) == []  # NeMo-RL's driver logs an empty extremum as -1.0
    findings = check_reported_loss_metrics(REPORT, empty, {"probs_ratio_min": -math.inf, "probs_ratio_max": math.inf},
                                           Tolerances())
    assert [(f.message.split(" = ")[0], f.expected, f.actual) for f in findings] == [
        ("probs_ratio_min", math.inf, -math.inf), ("probs_ratio_max", -math.inf, math.inf)]
    [finite] = check_reported_loss_metrics(REPORT, TRUTH, {"probs_ratio_min": math.inf}, Tolerances())
    assert (finite.expected, finite.actual) == (1.0, math.inf)  # an empty-looking report of a step with tokens
    [minus_one] = check_reported_loss_metrics(REPORT, TRUTH, {"probs_ratio_min": -1.0}, Tolerances())
    assert (minus_one.expected, minus_one.actual) == (1.0, -1.0)  # the driver's -1.0 where tokens were trained


def test_is_oob_ratio_is_judged_only_under_truncation():
    assert check_reported_loss_metrics(REPORT, TRUTH, {"is_oob_ratio": 0.3}, Tolerances()) == []  # not defined: skipped
    truncated = replace(TRUTH, is_oob_ratio=0.25)
    assert check_reported_loss_metrics(REPORT, truncated, {"is_oob_ratio": 0.25}, Tolerances()) == []
    [f] = check_reported_loss_metrics(REPORT, truncated, {"is_oob_ratio": 0.75}, Tolerances())
    assert f.message == "is_oob_ratio = 0.75; the oracle computes 0.25 for this step's rows"


def _with_adam(snap: TrainingSnapshot, betas=(0.9, 0.999), eps=1e-8) -> TrainingSnapshot:
    names = sorted(snap.weights)
    return replace(snap, moment_settings={n: (*betas, 2.0**-52) for n in names},
                   update_rule={n: (eps, 0.0) for n in names})


def test_the_optimizers_betas_and_eps_are_read_from_its_param_groups():
    """Weights that match cannot vouch for them: Adam's first update ignores β2, and float32's bound can hide ε."""
    before = _with_adam(_snap(BEFORE, step_min=0, step_max=0, epoch=0))
    right = MeasuredStep(before, _with_adam(_snap(AFTER, step_min=1, step_max=1, epoch=1)))
    assert check_update(REPORT, TRUTH, right, Tolerances()) == []
    [beta] = check_update(REPORT, TRUTH, replace(right, after=_with_adam(right.after, betas=(0.9, 0.95))), Tolerances())
    assert (beta.check, beta.row, beta.expected, beta.actual) == ("train.update", "b", [0.9, 0.999], [0.9, 0.95])
    assert "holds betas (0.9, 0.95) after the step" in beta.message
    [eps] = check_update(REPORT, TRUTH, replace(right, before=_with_adam(before, eps=1e-6)), Tolerances())
    assert (eps.check, eps.expected, eps.actual) == ("train.update", 1e-8, 1e-6) and "before the step" in eps.message
    amsgrad = "param group 0 of AdamW sets amsgrad: not AdamW's plain update"
    [flag] = check_update(REPORT, TRUTH, replace(right, after=replace(right.after, update_rule=None,
                                                                        update_rule_problem=amsgrad)), Tolerances())
    assert (flag.check, flag.actual) == ("train.update", amsgrad) and flag.message.startswith(amsgrad + " after the step")


def test_amsgrad_is_read_from_the_param_groups_and_maximize_is_allowed():
    """amsgrad changes the update; maximize only negates the gradient into the moments (AdamW(maximize=True) on -loss
    is AdamW on loss: a false positive of the fifth false-positive hunt), where a wrong sign is a wrong gradient."""
    from compactsim.harness.core.training_state import snapshot_training_state

    model = torch.nn.Linear(2, 1, dtype=torch.float64)
    scheduler_of = lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)  # noqa: E731
    for kwargs in ({}, {"maximize": True}):
        opt = torch.optim.AdamW(model.parameters(), **kwargs)
        assert snapshot_training_state(model, opt, scheduler_of(opt)).update_rule_problem is None
    opt = torch.optim.AdamW(model.parameters(), amsgrad=True)
    snap = snapshot_training_state(model, opt, scheduler_of(opt))
    assert (snap.update_rule, snap.update_rule_problem) == (None, "param group 0 of AdamW sets amsgrad: not AdamW's plain update")


def test_eps_and_weight_decay_may_be_numpy_scalars_or_one_element_tensors_but_not_strings():
    """A config read through numpy or a tensor hyperparameter holds the same number: the update rule is still AdamW's."""
    import numpy as np

    from compactsim.harness.core.training_state import snapshot_training_state

    model = torch.nn.Linear(2, 1, dtype=torch.float64)
    opt = torch.optim.AdamW(model.parameters(), eps=np.float64(1e-8), weight_decay=np.float32(0.5))
    opt.param_groups[0]["eps"] = torch.tensor(1e-8, dtype=torch.float64)
    snap = snapshot_training_state(model, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0))
    assert snap.update_rule_problem is None
    assert set(snap.update_rule.values()) == {(1e-8, 0.5)}
    opt.param_groups[0]["weight_decay"] = "0.5"
    snap = snapshot_training_state(model, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0))
    assert snap.update_rule_problem == "param group 0 of AdamW has eps=tensor(1.0000e-08, dtype=torch.float64), " \
                                      "weight_decay='0.5': not AdamW's plain update"


def test_an_optimizer_state_the_audit_cannot_read_is_a_finding_not_a_pass():
    from compactsim.harness.audit.training_checks import check_gradient

    truth = replace(TRUTH, clipped_gradient={"w": torch.ones(2, 2, dtype=torch.float64), "b": torch.ones(3, dtype=torch.float64)})
    problem = "OwnKeyAdamW's state for parameter 'b' has the keys ['state1', 'state2', 'step'], not AdamW's `exp_avg` and `exp_avg_sq`"
    m = _measured()
    m = replace(m, after=replace(m.after, moments_problem=problem))
    [f] = check_gradient(REPORT, truth, m, Tolerances())
    assert (f.check, f.actual) == ("train.gradient", problem)
    assert f.message.startswith("the gradient the optimizer applied cannot be read back: OwnKeyAdamW's state")
