"""The learning rate an update used, read back from the weights and AdamW's moments (`MeasuredStep.applied_lr`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
import torch

from compactsim.harness.audit.checks import Reporter, Tolerances
from compactsim.harness.audit.training_checks import check_applied_lr, check_step_quantities
from compactsim.harness.core.expectations import ExpectedTrainingStep
from compactsim.harness.core.training_state import MeasuredStep, snapshot_training_state

REPORT = Reporter("s", 0, "compactsim run s --seed 0")
LR = 1e-3


class _Policy(torch.nn.Module):
    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(7)
        self.w = torch.nn.Parameter(torch.randn(6, 8, generator=g, dtype=torch.float64).to(dtype))
        self.b = torch.nn.Parameter(torch.randn(5, generator=g, dtype=torch.float64).to(dtype))


def _state(dtype: torch.dtype = torch.float64, optimizer: Callable[..., torch.optim.Optimizer] = torch.optim.AdamW,
           warmup: int = 4, **kwargs):
    policy = _Policy(dtype)
    opt = optimizer(policy.parameters(), lr=LR, betas=(0.9, 0.999), eps=1e-8, foreach=False,
                    **{"weight_decay": 0.1, **kwargs})
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda n: min(1.0, (n + 1) / warmup))
    return policy, opt, sched


def _grads(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(6, 8, generator=g, dtype=torch.float64), "b": torch.randn(5, generator=g, dtype=torch.float64)}


def _step(policy, opt, sched, seed: int, *, scheduler_first: bool = False,
          after_update: Callable[[], None] | None = None) -> MeasuredStep:
    before = snapshot_training_state(policy, opt, sched)
    for name, p in policy.named_parameters():
        p.grad = _grads(seed)[name].to(p.dtype)
    if scheduler_first:
        sched.step()
    opt.step()
    if after_update is not None:
        after_update()
    if not scheduler_first:
        sched.step()
    return MeasuredStep(before, snapshot_training_state(policy, opt, sched))


def _truth(step: int, lr: float) -> ExpectedTrainingStep:
    return ExpectedTrainingStep(
        step=step, loss=0.0, actor_loss=0.0, kl_penalty=0.0, grad_norm=0.0, lr=lr, global_valid_tokens=1.0,
        global_valid_seqs=1.0, token_mult_prob_error=1.0, probs_ratio=1.0, probs_ratio_clamped=1.0,
        probs_ratio_min=1.0, probs_ratio_max=1.0, probs_ratio_clamped_min=1.0, probs_ratio_clamped_max=1.0,
        gen_kl_error=0.0, policy_kl_error=0.0, js_divergence_error=0.0, sampling_importance_ratio=1.0,
        approx_entropy=0.0, is_oob_ratio=None, num_valid_samples=1.0, params_after={}, clipped_gradient=None)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("optimizer", [torch.optim.AdamW, torch.optim.Adam], ids=["adamw", "adam-l2"])
def test_the_rate_each_update_used_is_read_back_within_its_bound(dtype, optimizer):
    """Over warmup (four different rates) and past it; Adam's L2 decay is inside the gradient, AdamW's is not."""
    policy, opt, sched = _state(dtype, optimizer)
    for step in range(6):
        used = opt.param_groups[0]["lr"]
        applied = _step(policy, opt, sched, step).applied_lr()
        assert applied is not None
        assert abs(applied.lr - used) <= applied.bound, (step, applied, used)
        # weights of size ~1: float64 reads the rate to ~1e-12, float32 to ~1e-3; bfloat16's ulp (2^-7) dwarfs
        # these updates (most weights do not move at all), so its bound is honest but says little
        assert applied.bound < {torch.float64: 1e-11, torch.float32: 5e-3, torch.bfloat16: 1e3}[dtype] * used


def test_float64_reads_the_rate_to_rounding():
    policy, opt, sched = _state()
    applied = _step(policy, opt, sched, 0).applied_lr()
    assert applied is not None and applied.lr == pytest.approx(LR / 4, rel=1e-13, abs=0.0)


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before:UserWarning")
def test_a_scheduler_stepped_before_the_optimizer_is_named_with_the_rate_the_weights_show():
    policy, opt, sched = _state()
    measured = _step(policy, opt, sched, 0, scheduler_first=True)
    assert measured.lr == LR / 4  # the param groups held the right rate when the step began
    tol = Tolerances.for_dtype("float64")
    (finding,) = check_step_quantities(REPORT, _truth(0, LR / 4), measured, {"lr": LR / 4, "loss": 0.0, "grad_norm": 0.0}, tol)
    assert finding.check == "train.lr"
    assert finding.actual == pytest.approx(LR / 2, rel=1e-12)
    assert finding.expected == LR / 4
    assert "so the scheduler stepped before the optimizer; the schedule gives 0.00025 at step 0" in finding.message
    assert "learning rate 0.0005 " in finding.message


def test_a_rate_set_by_hand_inside_the_step_is_named_without_the_scheduler_hint():
    policy, opt, sched = _state(warmup=1)
    group = opt.param_groups[0]
    group["lr"] = 3 * LR
    before = snapshot_training_state(policy, opt, sched)
    before = replace(before, lrs=(LR,))  # the rate was put back before anyone looked
    for name, p in policy.named_parameters():
        p.grad = _grads(0)[name]
    opt.step()
    group["lr"] = LR
    sched.step()
    measured = MeasuredStep(before, snapshot_training_state(policy, opt, sched))
    (finding,) = check_applied_lr(REPORT, _truth(0, LR), measured, Tolerances.for_dtype("float64"))
    assert finding.actual == pytest.approx(3 * LR, rel=1e-12)
    assert "scheduler" not in finding.message


def test_the_right_rate_has_no_finding():
    policy, opt, sched = _state()
    measured = _step(policy, opt, sched, 0)
    assert check_applied_lr(REPORT, _truth(0, LR / 4), measured, Tolerances.for_dtype("float64")) == []


def test_an_update_no_single_rate_explains_is_not_read():
    """A frozen tensor (restored after the update) or a hand-made extra move leaves no one rate: `train.update` speaks."""
    policy, opt, sched = _state()
    saved = policy.b.detach().clone()

    def restore_b() -> None:
        with torch.no_grad():
            policy.b.copy_(saved)

    assert _step(policy, opt, sched, 0, after_update=restore_b).applied_lr() is None

    def nudge_w() -> None:
        with torch.no_grad():
            policy.w[0, 0] += 1e-3

    assert _step(policy, opt, sched, 1, after_update=nudge_w).applied_lr() is None


def test_amsgrad_is_not_read():
    policy, opt, sched = _state(amsgrad=True)
    assert _step(policy, opt, sched, 0).applied_lr() is None


def test_nothing_to_read_without_one_update_or_without_any_move():
    policy, opt, sched = _state(weight_decay=0.0)
    before = snapshot_training_state(policy, opt, sched)
    assert MeasuredStep(before, before).applied_lr() is None  # no update at all
    for p in policy.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    sched.step()
    assert MeasuredStep(before, snapshot_training_state(policy, opt, sched)).applied_lr() is None  # u = 0: no direction
