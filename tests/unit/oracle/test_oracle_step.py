"""The oracle's training step: its loss, optimizer, schedule and route rule, checked by hand and against torch."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from compactsim.harness.oracle.optimizer import AdamState, adamw_update, clip, learning_rate, weight_decays
from compactsim.harness.oracle.routes import CallRoutes, expected_row_routes
from compactsim.harness.oracle.step_loss import row_loss
from compactsim.harness.oracle.step_settings import LossSettings, OptimizerSettings, StepSettings

pytestmark = pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad=True to a scalar")


def _params(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"a": torch.randn(3, 4, generator=g, dtype=torch.float64), "b": torch.randn(5, generator=g, dtype=torch.float64)}


# ------------------------------------------------------------------------------------------- optimizer


def test_adamw_matches_torch_adamw_over_three_steps_with_weight_decay():
    settings = OptimizerSettings(learning_rate=1e-2, weight_decay=0.1)
    params = _params(0)
    live = {k: torch.nn.Parameter(v.clone()) for k, v in params.items()}
    opt = torch.optim.AdamW(live.values(), lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1, foreach=False)
    state = AdamState()
    for step in range(3):
        grads = _params(10 + step)
        for k, p in live.items():
            p.grad = grads[k].clone()
        opt.step()
        params, state = adamw_update(params, grads, state, settings, 1e-2)
        for k in params:
            assert torch.allclose(params[k], live[k].detach(), rtol=0, atol=1e-15), (step, k)
    assert state.steps == {k: 3 for k in params}


def test_a_skipped_parameter_follows_torch_adamw_on_a_none_gradient():
    """A plain loop leaves `.grad` None on a parameter no row reached and torch's AdamW skips it: no weight
    decay, no moment decay, and its own step count stays behind, so its next update's bias corrections
    use that count. The oracle's `skip` reproduces it; the zero-gradient convention updates it instead."""
    settings = OptimizerSettings(learning_rate=1e-2, weight_decay=0.1)
    params = _params(0)
    live = {k: torch.nn.Parameter(v.clone()) for k, v in params.items()}
    opt = torch.optim.AdamW(live.values(), lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1, foreach=False)
    state = AdamState()
    for step, skipped in enumerate(({"b"}, set(), {"a"}, set())):
        grads = _params(10 + step)
        for k, p in live.items():
            p.grad = None if k in skipped else grads[k].clone()
        opt.step()
        params, state = adamw_update(params, grads, state, settings, 1e-2, skip=frozenset(skipped))
        for k in params:
            assert torch.allclose(params[k], live[k].detach(), rtol=0, atol=1e-15), (step, k)
    assert state.steps == {"a": 3, "b": 3} == {k: int(opt.state[p]["step"]) for k, p in live.items()}
    zero_filled, _ = adamw_update(_params(0), {"a": _params(10)["a"]}, AdamState(), settings, 1e-2)
    assert not torch.equal(zero_filled["b"], _params(0)["b"])  # g = 0 still decays the weight


def test_weight_decay_follows_megatrons_no_decay_groups_only_when_the_trainer_shows_exactly_them():
    params = {"w.weight": torch.zeros(3, 4), "w.bias": torch.zeros(4), "ln.weight": torch.zeros(4), "b_in": torch.zeros(2, 4)}
    everywhere = dict.fromkeys(params, 0.1)
    megatron = {"w.weight": 0.1, "w.bias": 0.0, "ln.weight": 0.0, "b_in": 0.1}  # 2-D and not named *.bias: decayed
    assert weight_decays(params, 0.1, None) == everywhere
    assert weight_decays(params, 0.1, everywhere) == everywhere
    assert weight_decays(params, 0.1, megatron) == megatron
    assert weight_decays(params, 0.1, dict.fromkeys(params, 0.0)) == everywhere  # no decay at all: judged as configured
    assert weight_decays(params, 0.1, {**megatron, "ln.weight": 0.1}) == everywhere  # half a convention is none
    assert weight_decays(params, 0.0, megatron) == dict.fromkeys(params, 0.0)
    after, _ = adamw_update({"w.bias": torch.ones(2, dtype=torch.float64)}, {}, AdamState(),
                            OptimizerSettings(learning_rate=0.5, weight_decay=0.1), 0.5, decays={"w.bias": 0.0})
    assert torch.equal(after["w.bias"], torch.ones(2, dtype=torch.float64))  # g = 0, λ = 0: nothing moves


def test_a_parameter_without_gradient_still_decays_its_moments_but_does_not_move_at_step_one():
    params = _params(1)
    after, state = adamw_update(params, {"a": torch.ones(3, 4, dtype=torch.float64)}, AdamState(), OptimizerSettings(), 1e-3)
    assert torch.equal(after["b"], params["b"])
    assert torch.allclose(after["a"], params["a"] - 1e-3 / (1 + 1e-8), atol=1e-18)
    assert torch.equal(state.exp_avg["b"], torch.zeros(5, dtype=torch.float64))


def test_clip_scales_every_gradient_by_max_norm_over_norm_plus_1e_6_and_reports_the_norm_before():
    grads = {"a": torch.tensor([3.0, 0.0], dtype=torch.float64), "b": torch.tensor([4.0], dtype=torch.float64)}
    clipped, norm = clip(grads, 1.0)
    assert norm == 5.0
    assert torch.equal(clipped["a"], grads["a"] * (1.0 / (5.0 + 1e-6)))
    live = [torch.nn.Parameter(torch.zeros(2, dtype=torch.float64)), torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))]
    live[0].grad, live[1].grad = grads["a"].clone(), grads["b"].clone()
    assert float(torch.nn.utils.clip_grad_norm_(live, 1.0, foreach=False)) == norm
    assert torch.allclose(live[0].grad, clipped["a"], atol=1e-16)
    unclipped, same = clip(grads, None)
    assert same == 5.0 and torch.equal(unclipped["a"], grads["a"])
    small, _ = clip(grads, 10.0)
    assert torch.equal(small["b"], grads["b"])  # below the bound nothing changes


def test_learning_rate_warms_up_linearly_per_scheduler_increment():
    s = OptimizerSettings(learning_rate=0.4, lr_warmup_steps=4)
    assert [learning_rate(s, n) for n in range(6)] == [0.1, 0.2, 0.30000000000000004, 0.4, 0.4, 0.4]
    assert learning_rate(OptimizerSettings(learning_rate=0.4), 0) == 0.4


# ------------------------------------------------------------------------------------------- loss


def _grad(lp_values, gen_values, advantage, settings, ref_values=None):
    lp = torch.tensor(lp_values, dtype=torch.float64, requires_grad=True)
    ref = None if ref_values is None else torch.tensor(ref_values, dtype=torch.float64)
    out = row_loss(lp, torch.tensor(gen_values, dtype=torch.float64), ref, advantage, settings)
    (out.actor_sum + out.kl_sum).backward()
    return out, lp.grad.tolist()


def test_on_policy_surrogate_is_minus_advantage_per_token_with_gradient_minus_advantage():
    out, grad = _grad([-1.0, -2.0], [-1.0, -2.0], 2.0, LossSettings(reference_policy_kl_penalty=0.0))
    assert float(out.actor_sum) == -4.0 and float(out.kl_sum) == 0.0
    assert grad == [-2.0, -2.0]


def test_token_level_importance_weights_scale_each_token_and_carry_no_gradient():
    s = LossSettings(reference_policy_kl_penalty=0.0, use_importance_sampling_correction=True)
    out, grad = _grad([-1.0, -2.0], [-1.5, -2.0], 2.0, s)
    w0 = math.exp(0.5)
    assert float(out.actor_sum) == pytest.approx(-2.0 * (w0 + 1.0), rel=1e-15)
    assert grad == pytest.approx([-2.0 * w0, -2.0], rel=1e-15)


def test_icepop_drops_tokens_outside_the_bounds_and_seq_mask_tis_drops_the_whole_row():
    icepop = LossSettings(reference_policy_kl_penalty=0.0, use_importance_sampling_correction=True,
                          truncated_importance_sampling_type="icepop", truncated_importance_sampling_ratio=1.5,
                          truncated_importance_sampling_ratio_min=0.5)
    out, grad = _grad([-1.0, -2.0], [-1.5, -2.0], 1.0, icepop)  # w = e^0.5 ≈ 1.65 (dropped), 1 (kept)
    assert float(out.actor_sum) == -1.0 and grad == [0.0, -1.0]
    seq = LossSettings(reference_policy_kl_penalty=0.0, use_importance_sampling_correction=True,
                       truncated_importance_sampling_type="seq-mask-tis", truncated_importance_sampling_ratio=1.2,
                       truncated_importance_sampling_ratio_min=0.5)
    out, grad = _grad([-1.0, -2.0], [-1.5, -2.0], 1.0, seq)  # geometric mean e^0.25 ≈ 1.28 > 1.2: row dropped
    assert float(out.actor_sum) == 0.0 and grad == [0.0, 0.0]


def test_dual_clip_bounds_the_loss_of_negative_advantages():
    s = LossSettings(reference_policy_kl_penalty=0.0, ratio_clip_c=3.0)
    out, _ = _grad([-1.0], [-1.0], -2.0, s)
    assert float(out.actor_sum) == 2.0  # min(max(-A·1, -A·1), -A·3) = 2


def test_k3_kl_value_and_its_score_function_gradient():
    s = LossSettings(reference_policy_kl_penalty=0.5, reference_policy_kl_type="k3")
    out, grad = _grad([-1.0], [-1.0], 0.0, s, ref_values=[-1.5])
    x = -0.5
    kl = math.exp(x) - 1 - x
    assert float(out.kl_sum) == pytest.approx(0.5 * kl, rel=1e-15)
    # d/dlp [exp(lp - sg lp) · (e^(ref-lp) - 1 - (ref-lp))] = kl + 1 - e^x; the advantage is 0 (no actor term)
    assert grad == pytest.approx([0.5 * (kl + 1 - math.exp(x))], rel=1e-15)


def test_kl_input_clamp_stops_the_gradient_where_it_bites():
    s = LossSettings(reference_policy_kl_penalty=1.0, reference_policy_kl_type="k1", kl_input_clamp_value=0.25,
                     kl_output_clamp_value=None)
    out, grad = _grad([-1.0], [-1.0], 0.0, s, ref_values=[-2.0])  # x = -1 clamped to -0.25
    assert float(out.kl_sum) == 0.25 and grad == [0.0]


# ------------------------------------------------------------------------------------------- settings


def test_step_settings_defaults_equal_the_pipelines_documented_defaults():
    from compactsim.harness.pipeline.loss import LossConfig
    from compactsim.harness.pipeline.train_config import PolicyConfig
    from compactsim.harness.pipeline.trainer import ADAM_BETAS, ADAM_EPS

    loss, pipe = LossSettings(), LossConfig()
    for name in LossSettings.__dataclass_fields__:
        assert getattr(loss, name) == getattr(pipe, name), name
    opt, policy = OptimizerSettings(), PolicyConfig()
    for name in ("learning_rate", "weight_decay", "max_grad_norm", "lr_warmup_steps"):
        assert getattr(opt, name) == getattr(policy, name), name
    assert (opt.betas, opt.eps) == (ADAM_BETAS, ADAM_EPS)


def test_step_settings_read_a_scenarios_trainer_values():
    s = StepSettings.from_values({"loss_fn": {"reference_policy_kl_penalty": 0.0},
                                  "policy": {"precision": "float64", "learning_rate": 0.5, "router_replay_enabled": True}})
    assert (s.loss.reference_policy_kl_penalty, s.optimizer.learning_rate, s.precision, s.router_replay) == (0.0, 0.5, "float64", True)


# ------------------------------------------------------------------------------------------- routes


def _routes(n: int, base: int) -> np.ndarray:
    return (np.arange(n * 2).reshape(n, 1, 2) + base).astype(np.int64)  # (n, L=1, K=2), distinct per call


def test_route_rule_owner_repair_and_boundary_sentinel():
    # call 1: prompt 3 + sampled 2 (5 tokens, final row is a placeholder); call 2 extends to 8 tokens
    c1, c2 = CallRoutes(5, _routes(5, 100)), CallRoutes(8, _routes(8, 200))
    final = expected_row_routes([c1, c2], (1, 2), is_final_trace=True)
    assert final.routes[:4].tolist() == _routes(5, 100)[:4].tolist()  # owned by call 1
    assert final.routes[4].tolist() == _routes(8, 200)[4].tolist()  # call 1's placeholder, repaired by call 2's prefill
    assert final.routes[5:].tolist() == _routes(8, 200)[5:].tolist()
    assert (final.sentinel_positions, final.repaired_positions) == ((), (4,))
    split = expected_row_routes([c1, c2], (1, 2), is_final_trace=False)
    assert split.routes[7].tolist() == [[-1, -1]] and split.sentinel_positions == (7,)


def test_route_rule_a_call_without_routes_is_all_sentinel_and_repairs_nothing():
    c1, c2 = CallRoutes(5, _routes(5, 100)), CallRoutes(8, None)
    row = expected_row_routes([c1, c2], (1, 2), is_final_trace=True)
    assert row.routes[4].tolist() == [[-1, -1]] and row.repaired_positions == ()
    assert (row.routes[5:] == -1).all()


# ------------------------------------------------------------------------------------------- reference


def _truths(monkeypatch: pytest.MonkeyPatch, *, shortcut: bool) -> tuple[list[object], list[bool]]:
    """The oracle's step truths for a two-step KL scenario, and per model it built whether that one takes gradients."""
    from compactsim.harness.oracle import step, training
    from compactsim.harness.runner import RunOptions, resolve_scenarios, run_scenario

    truths: list[object] = []
    built: list[bool] = []
    expected_step, model = step.expected_step, step._model

    def recording(*args: object, **kwargs: object) -> object:
        out = expected_step(*args, **kwargs)
        truths.append(out[0])
        return out

    monkeypatch.setattr(training, "expected_step", recording)
    monkeypatch.setattr(step, "_model", lambda *a, grad: built.append(grad) or model(*a, grad=grad))
    if not shortcut:
        monkeypatch.setattr(step, "_same", lambda a, b: False)
    record = run_scenario(resolve_scenarios(["kl-mask-sample-steps"])[0], RunOptions()).record
    assert record.passed, record.findings
    return truths, built


def _same_value(a: object, b: object) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)  # type: ignore[arg-type]
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_value(v, b[k]) for k, v in a.items())  # type: ignore[union-attr]
    return a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))  # type: ignore[arg-type]


def test_the_reference_forward_is_left_out_only_while_its_weights_are_the_policy_s_and_the_truth_is_the_same(monkeypatch):
    """Step 0's reference is the policy itself, so its logprobs are the policy's, detached (the module docstring's
    claim); from step 1 the weights differ and the reference model is built again. Every field of every step's
    truth equals the one computed with a second forward at every step, bit for bit."""
    from dataclasses import fields

    fast, fast_models = _truths(monkeypatch, shortcut=True)
    monkeypatch.undo()
    slow, slow_models = _truths(monkeypatch, shortcut=False)
    assert (fast_models, slow_models) == ([True, True, False], [True, False, True, False])
    assert len(fast) == len(slow) == 2 and fast[1].kl_penalty > 0  # type: ignore[attr-defined]
    for f, s in zip(fast, slow, strict=True):
        for name in (x.name for x in fields(f)):  # type: ignore[arg-type]
            assert _same_value(getattr(f, name), getattr(s, name)), name
