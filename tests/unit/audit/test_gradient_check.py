"""The applied gradient, read back from AdamW's first moment, against the oracle's clipped gradient."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from compactsim.harness.audit.checks import Reporter, Tolerances
from compactsim.harness.audit.training_checks import check_continuity, check_gradient, check_update
from compactsim.harness.core.expectations import ExpectedTrainingStep
from compactsim.harness.core.training_state import MeasuredStep, snapshot_training_state
from tests.quality._adamw import adamw_step

REPORT = Reporter("s", 0, "compactsim run s --seed 0")


class _Policy(torch.nn.Module):
    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(3, 4, dtype=dtype))
        self.b = torch.nn.Parameter(torch.zeros(5, dtype=dtype))


def _state(dtype: torch.dtype = torch.float64, betas=(0.9, 0.999)):
    policy = _Policy(dtype)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-3, betas=betas, weight_decay=0.1, foreach=False)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    return policy, optimizer, scheduler


def _grads(seed: int, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(3, 4, generator=g, dtype=torch.float64) * 10.0 ** -(seed % 4),
            "b": torch.randn(5, generator=g, dtype=torch.float64)}


def _step(policy, optimizer, scheduler, grads: dict[str, torch.Tensor]) -> MeasuredStep:
    before = snapshot_training_state(policy, optimizer, scheduler)
    for name, p in policy.named_parameters():
        p.grad = grads[name].to(p.dtype).clone()
    optimizer.step()
    scheduler.step()
    return MeasuredStep(before, snapshot_training_state(policy, optimizer, scheduler))


def _truth(expected: dict[str, torch.Tensor]) -> ExpectedTrainingStep:
    zeros = {k: torch.zeros_like(v) for k, v in expected.items()}
    return ExpectedTrainingStep(
        step=0, loss=0.0, actor_loss=0.0, kl_penalty=0.0, grad_norm=0.0, lr=1e-3, global_valid_tokens=1.0,
        global_valid_seqs=1.0, token_mult_prob_error=1.0, probs_ratio=1.0, probs_ratio_clamped=1.0,
        probs_ratio_min=1.0, probs_ratio_max=1.0, probs_ratio_clamped_min=1.0, probs_ratio_clamped_max=1.0,
        gen_kl_error=0.0, policy_kl_error=0.0, js_divergence_error=0.0, sampling_importance_ratio=1.0,
        approx_entropy=0.0, is_oob_ratio=None, num_valid_samples=1.0, params_after=zeros, clipped_gradient=expected,
        weight_decays={k: 0.1 for k in expected})  # `_state`'s AdamW decays every parameter


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_the_applied_gradient_is_read_back_within_its_stated_reading_error(dtype):
    """Over several AdamW steps (moments carrying earlier gradients of other scales) the reading error
    bound holds for the gradient as the optimizer received it (in the parameter's dtype)."""
    policy, optimizer, scheduler = _state(dtype)
    for seed in range(5):
        grads = _grads(seed, dtype)
        measured = _step(policy, optimizer, scheduler, grads)
        applied = measured.applied_gradient()
        assert applied is not None and set(applied) == {"w", "b"}
        for name, (g, err) in applied.items():
            sent = grads[name].to(dtype).to(torch.float64)
            assert bool(((g - sent).abs() <= err).all()), (seed, name, float((g - sent).abs().max()), float(err.max()))


def test_float64_first_step_reads_the_gradient_to_rounding():
    policy, optimizer, scheduler = _state()
    grads = _grads(1, torch.float64)
    g, _ = _step(policy, optimizer, scheduler, grads).applied_gradient()["w"]
    assert torch.allclose(g, grads["w"], rtol=1e-15, atol=0.0)


def test_no_reading_without_exactly_one_adam_update():
    policy, optimizer, scheduler = _state()
    before = snapshot_training_state(policy, optimizer, scheduler)
    assert MeasuredStep(before, snapshot_training_state(policy, optimizer, scheduler)).applied_gradient() is None  # no update
    for _ in range(2):
        for p in policy.parameters():
            p.grad = torch.ones_like(p)
        optimizer.step()
    assert MeasuredStep(before, snapshot_training_state(policy, optimizer, scheduler)).applied_gradient() is None  # two
    sgd_policy = _Policy(torch.float64)
    sgd = torch.optim.SGD(sgd_policy.parameters(), lr=0.1, momentum=0.9)
    assert snapshot_training_state(sgd_policy, sgd, torch.optim.lr_scheduler.LambdaLR(sgd, lambda _: 1.0)).first_moments is None


def test_a_right_gradient_has_no_finding_and_a_scaled_one_is_named_with_its_ratio():
    policy, optimizer, scheduler = _state()
    grads = _grads(2, torch.float64)
    right = _step(policy, optimizer, scheduler, grads)
    assert check_gradient(REPORT, _truth(grads), right, Tolerances()) == []
    policy, optimizer, scheduler = _state()
    scaled = _step(policy, optimizer, scheduler, {k: 1.5 * v for k, v in grads.items()})
    [f] = check_gradient(REPORT, _truth(grads), scaled, Tolerances())
    assert f.check == "train.gradient" and f.row in ("w", "b")
    assert "2 of 2 parameter tensors off their bound" in f.message
    assert "the applied gradient is 1.5x the expected one" in f.message


def test_a_clip_coefficient_from_a_float32_norm_passes_where_clipping_binds_and_nowhere_else():
    """NeMo-RL's DTensor v1 worker and Automodel clip with a norm summed in float32: the whole gradient is off the
    oracle's by one common factor within 2^-16 of 1. Where clipping binds that passes; a factor of 1 + 1e-4, or the
    same 1 + 2e-6 where clipping did not bind, is a finding."""
    grads = _grads(2, torch.float64)
    binding = replace(_truth(grads), clip_coefficient=0.5)
    for truth, factor, found in ((binding, 1 + 2e-6, False), (binding, 1 - 1e-5, False), (binding, 1 + 1e-4, True),
                                 (replace(binding, clip_coefficient=1.0), 1 + 2e-6, True),
                                 (replace(binding, clip_coefficient=None), 1 + 2e-6, True)):
        policy, optimizer, scheduler = _state()
        measured = _step(policy, optimizer, scheduler, {k: factor * v for k, v in grads.items()})
        findings = check_gradient(REPORT, truth, measured, Tolerances())
        assert [f.check for f in findings] == (["train.gradient"] if found else []), (truth.clip_coefficient, factor)


def test_the_whole_model_bound_catches_what_no_single_entry_shows():
    """bfloat16 entries are judged loosely (4x their tensor's largest), the whole model at 0.25: a gradient
    at 1.4x passes every entry and fails the whole."""
    policy, optimizer, scheduler = _state(torch.bfloat16)
    grads = {k: v.to(torch.bfloat16).to(torch.float64) for k, v in _grads(3, torch.float64).items()}
    measured = _step(policy, optimizer, scheduler, {k: 1.4 * v for k, v in grads.items()})
    [f] = check_gradient(REPORT, _truth(grads), measured, Tolerances.for_dtype("bfloat16"))
    assert "0 of 2 parameter tensors off their bound, whole-model relative error 0.4" in f.message
    policy, optimizer, scheduler = _state(torch.bfloat16)
    assert check_gradient(REPORT, _truth(grads), _step(policy, optimizer, scheduler, grads),
                          Tolerances.for_dtype("bfloat16")) == []


def test_an_exactly_zero_expected_gradient_is_judged_entry_by_entry():
    """Every advantage 0 and the KL at its minimum: the oracle's gradient is exactly 0 and no relative error is
    defined. Rounding noise far inside each entry's absolute bound passes (a trainer whose reference logprobs come from
    another batch layout than its training forward gets ~1e-20); a real gradient still fails its entries."""
    zero = {k: torch.zeros_like(v) for k, v in _grads(0, torch.float64).items()}
    noise = {k: torch.full_like(v, 7e-20) for k, v in zero.items()}
    policy, optimizer, scheduler = _state()
    assert check_gradient(REPORT, _truth(zero), _step(policy, optimizer, scheduler, noise), Tolerances()) == []
    policy, optimizer, scheduler = _state()
    [f] = check_gradient(REPORT, _truth(zero), _step(policy, optimizer, scheduler, _grads(0, torch.float64)),
                         Tolerances())
    assert "2 of 2 parameter tensors off their bound" in f.message and "exactly zero" in f.message


def test_nothing_to_judge_without_the_oracles_gradient_or_a_reading():
    policy, optimizer, scheduler = _state()
    grads = _grads(0, torch.float64)
    measured = _step(policy, optimizer, scheduler, grads)
    assert check_gradient(REPORT, replace(_truth(grads), clipped_gradient=None), measured, Tolerances()) == []
    stale = MeasuredStep(measured.after, measured.after)  # no update between the snapshots
    assert check_gradient(REPORT, _truth(grads), stale, Tolerances()) == []


def test_a_non_finite_applied_gradient_is_a_finding():
    policy, optimizer, scheduler = _state()
    grads = _grads(0, torch.float64)
    bad = {k: v.clone() for k, v in grads.items()}
    bad["b"][2] = math.nan
    [f] = check_gradient(REPORT, _truth(grads), _step(policy, optimizer, scheduler, bad), Tolerances())
    assert f.row == "b" and "1 of 2" in f.message


def test_moments_reset_between_steps_break_continuity():
    policy, optimizer, scheduler = _state()
    first = _step(policy, optimizer, scheduler, _grads(0, torch.float64))
    for s in optimizer.state.values():
        s["exp_avg"].zero_()
    second = _step(policy, optimizer, scheduler, _grads(1, torch.float64))
    [f] = check_continuity(REPORT, first, second)
    assert f.check == "train.continuity" and "first moment of 2 parameter tensor(s)" in f.message and f.row == "b"


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_moments_agree_over_consistent_updates_even_with_a_wrong_gradient(dtype):
    policy, optimizer, scheduler = _state(dtype)
    for seed in range(6):
        measured = _step(policy, optimizer, scheduler, {k: 3.0 * v for k, v in _grads(seed, dtype).items()})
        assert measured.moments_agree() is True, seed


def test_moments_reset_during_the_step_is_named_as_a_reset_not_as_a_wrong_gradient():
    policy, optimizer, scheduler = _state()
    _step(policy, optimizer, scheduler, _grads(0, torch.float64))
    grads = _grads(1, torch.float64)
    before = snapshot_training_state(policy, optimizer, scheduler)
    for s in optimizer.state.values():
        s["exp_avg"].zero_()
        s["exp_avg_sq"].zero_()
    measured = _step(policy, optimizer, scheduler, grads)
    reset = MeasuredStep(before, measured.after)
    assert reset.moments_agree() is False
    [f] = check_gradient(REPORT, _truth(grads), reset, Tolerances())
    assert f.check == "train.continuity" and "do not agree on one gradient" in f.message


def _step_with_beta2(policy, optimizer, scheduler, grads: dict[str, torch.Tensor], beta2: float) -> MeasuredStep:
    """One hand-written AdamW step keeping torch's state keys whose second moment uses `beta2`, not its group's."""
    before = snapshot_training_state(policy, optimizer, scheduler)
    adamw_step(optimizer, beta2=beta2, grads={p: grads[name].to(p.dtype) for name, p in policy.named_parameters()})
    return MeasuredStep(before, snapshot_training_state(policy, optimizer, scheduler))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_a_second_moment_advanced_with_another_beta2_is_a_finding_even_when_the_update_is_right(dtype):
    """Bias correction makes the first update independent of β2: the weights and the first moment are right,
    only the second moment shows a hand-written AdamW that keeps torch's keys but uses β2 = 0.95."""
    policy, optimizer, scheduler = _state(dtype)
    grads = _grads(0, torch.float64)
    expected = {k: v.to(dtype).to(torch.float64) for k, v in grads.items()}
    measured = _step_with_beta2(policy, optimizer, scheduler, grads, 0.95)
    assert measured.moments_agree() is False
    [f] = check_gradient(REPORT, _truth(expected), measured, Tolerances.for_dtype(str(dtype).removeprefix("torch.")))
    assert f.check == "train.continuity" and "second moment of 'b'" in f.message and f.row == "b"
    assert f.actual == pytest.approx(f.expected * 0.05 / 0.001, rel=1e-3)  # (1 − 0.95)·g² read with 1 − 0.999
    policy, optimizer, scheduler = _state(dtype)
    right = _step_with_beta2(policy, optimizer, scheduler, grads, 0.999)  # the same hand-written step with the group's β2
    assert right.moments_agree() is True
    assert check_gradient(REPORT, _truth(expected), right, Tolerances.for_dtype(str(dtype).removeprefix("torch."))) == []


def _two_steps(lazy: bool) -> tuple[MeasuredStep, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Step 0 gives every entry momentum; at step 1 row 1 of `w` gets no gradient. (measured step 1, its gradient,
    the weights a right AdamW step 1 gives). `lazy`: row 1 is put back after the step, as a row-sparse Adam leaves it."""
    import copy

    policy, optimizer, scheduler = _state()
    _step(policy, optimizer, scheduler, _grads(0, torch.float64))
    grads = _grads(1, torch.float64)
    grads["w"][1] = 0.0
    right = copy.deepcopy((policy, optimizer, scheduler))
    _step(*right, grads)
    before_row = policy.w.detach()[1].clone()
    measured = _step(policy, optimizer, scheduler, grads)
    if lazy:
        with torch.no_grad():
            policy.w[1] = before_row
        measured = MeasuredStep(measured.before, snapshot_training_state(policy, optimizer, scheduler))
    return measured, grads, {name: p.detach().clone() for name, p in right[0].named_parameters()}


def test_an_entry_no_gradient_reached_must_move_as_the_optimizers_own_moments_say():
    """A gradient under its tolerance leaves Adam's step open by up to 2·lr (its sign could flip); an exactly-zero
    gradient, read back as zero from the first moment, leaves nothing open: decay and momentum settle the step."""
    right, grads, want = _two_steps(lazy=False)
    truth = replace(_truth(grads), params_after=want)
    assert check_update(REPORT, truth, right, Tolerances()) == []
    lazy, _, _ = _two_steps(lazy=True)
    [f] = check_update(REPORT, truth, lazy, Tolerances())
    assert f.check == "train.update" and f.row == "w" and "1 of 2 parameter tensors" in f.message
    moved = float((want["w"][1] - lazy.before.weights["w"][1]).abs().max())
    assert 0 < moved < 2 * truth.lr  # inside the allowance an entry under its gradient tolerance gets


def test_decay_applied_outside_the_optimizer_settles_like_the_optimizers_own():
    """`p.mul_(1 - lr·λ)` before a `weight_decay=0` step is AdamW's decoupled decay: where no gradient reached, the
    step is judged with the oracle's λ, not the param group's 0 (false positive of the fifth false-positive hunt)."""
    import copy

    right, grads, want = _two_steps(lazy=False)
    truth = replace(_truth(grads), params_after=want)
    policy, optimizer, scheduler = _state()
    _step(policy, optimizer, scheduler, _grads(0, torch.float64))
    by_hand = copy.deepcopy((policy, optimizer, scheduler))
    policy, optimizer, scheduler = by_hand
    before = snapshot_training_state(policy, optimizer, scheduler)
    lr = optimizer.param_groups[0]["lr"]
    for group in optimizer.param_groups:
        group["weight_decay"] = 0.0
    with torch.no_grad():
        for p in policy.parameters():
            p.mul_(1.0 - lr * 0.1)
    for name, p in policy.named_parameters():
        p.grad = grads[name].clone()
    optimizer.step()
    scheduler.step()
    measured = MeasuredStep(before, snapshot_training_state(policy, optimizer, scheduler))
    assert check_update(REPORT, truth, measured, Tolerances()) == []
    [f] = check_update(REPORT, replace(truth, weight_decays={"w": 0.0, "b": 0.0}), measured, Tolerances())
    assert f.check == "train.update" and f.row == "w"  # the same step judged with no decay is a finding
