"""ClippedPG loss: hand-computed values on tiny tensors, global normalisation, masking."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from compactsim.harness.core.seeds import rng
from compactsim.harness.pipeline.loss import (
    METRIC_KEYS,
    LossConfig,
    LossOutput,
    ValidCounts,
    clipped_pg_loss,
    combine_metrics,
    valid_counts,
)

torch.set_num_threads(1)

F64 = torch.float64
EPS = 1e-8  # NeMo's masked_mean denominator epsilon
NO_KL = LossConfig(reference_policy_kl_penalty=0.0)


def _t(rows: list) -> torch.Tensor:
    return torch.tensor(rows, dtype=F64)


def _run(
    cfg: LossConfig,
    *,
    curr: list,
    token_mask: list | None = None,
    sample_mask: list | None = None,
    advantages: list | None = None,
    prev: list | None = None,
    gen: list | None = None,
    ref: list | None = None,
) -> tuple[LossOutput, torch.Tensor]:
    """Loss and d loss / d curr for one own-position batch (column 0 unused) that is its own logical batch."""
    curr_t = _t(curr).requires_grad_()
    B, S = curr_t.shape
    tm = _t(token_mask) if token_mask is not None else _t([[0.0] + [1.0] * (S - 1)] * B)
    sm = _t(sample_mask) if sample_mask is not None else torch.ones(B, dtype=F64)
    prev_t = _t(prev) if prev is not None else curr_t.detach().clone()
    n = valid_counts(tm, sm)
    out = clipped_pg_loss(
        cfg,
        curr_logprobs=curr_t,
        token_mask=tm,
        sample_mask=sm,
        advantages=_t(advantages) if advantages is not None else torch.ones(B, S, dtype=F64),
        prev_logprobs=prev_t,
        generation_logprobs=_t(gen) if gen is not None else prev_t.clone(),
        reference_logprobs=_t(ref) if ref is not None else None,
        global_valid_tokens=n.tokens,
        global_valid_seqs=n.seqs,
    )
    out.loss.backward()
    assert curr_t.grad is not None
    return out, curr_t.grad


def _close(actual: float, expected: float) -> None:
    assert actual == pytest.approx(expected, rel=1e-12, abs=1e-15)


def _close_t(actual: torch.Tensor, expected: list) -> None:
    torch.testing.assert_close(actual, _t(expected), rtol=1e-12, atol=1e-15)


L05, L15, L5 = math.log(0.5), math.log(1.5), math.log(5.0)


# --- Policy term ---------------------------------------------------------------------------------


def test_ppo_clipping_takes_the_pessimistic_term_for_positive_advantage() -> None:
    # prev = 0, so r = exp(curr) = [0.5, 1, 1.5]; ε = 0.2 → r̂ = [0.8, 1, 1.2]; ℓ = max(-r, -r̂)
    out, grad = _run(NO_KL, curr=[[0.0, L05, 0.0, L15]], prev=[[0.0, 0.0, 0.0, 0.0]])
    _close(out.loss.item(), (-0.5 - 1.0 - 1.2) / (3 + EPS))
    _close_t(grad, [[0.0, -0.5 / (3 + EPS), -1.0 / (3 + EPS), 0.0]])  # clipped token: no gradient
    _close(out.metrics["probs_ratio"], 3.0 / (3 + EPS))
    _close(out.metrics["probs_ratio_clamped"], 3.0 / (3 + EPS))
    _close(out.metrics["probs_ratio_min"], 0.5)
    _close(out.metrics["probs_ratio_max"], 1.5)
    _close(out.metrics["probs_ratio_clamped_min"], 0.8)
    _close(out.metrics["probs_ratio_clamped_max"], 1.2)


def test_ppo_clipping_takes_the_pessimistic_term_for_negative_advantage() -> None:
    # A = -1: ℓ = max(r, r̂) = [0.8, 1, 1.5]; the r = 0.5 token is clipped
    out, grad = _run(NO_KL, curr=[[0.0, L05, 0.0, L15]], prev=[[0.0] * 4], advantages=[[-1.0] * 4])
    _close(out.loss.item(), (0.8 + 1.0 + 1.5) / (3 + EPS))
    _close_t(grad, [[0.0, 0.0, 1.0 / (3 + EPS), 1.5 / (3 + EPS)]])


def test_asymmetric_clip_bounds_use_ratio_clip_min_below_and_max_above() -> None:
    cfg = LossConfig(reference_policy_kl_penalty=0.0, ratio_clip_min=0.1, ratio_clip_max=0.3)
    out, _ = _run(cfg, curr=[[0.0, L05, 0.0, L15]], prev=[[0.0] * 4])
    _close(out.metrics["probs_ratio_clamped_min"], 0.9)
    _close(out.metrics["probs_ratio_clamped_max"], 1.3)
    _close(out.loss.item(), (-0.5 - 1.0 - 1.3) / (3 + EPS))


def test_dual_clip_bounds_the_loss_only_where_advantage_is_negative() -> None:
    cfg = LossConfig(reference_policy_kl_penalty=0.0, ratio_clip_c=3.0)
    # both rows: r = [0.5, 1, 5]; row 0 A = -1 → max(r, r̂) = [0.8, 1, 5] → min(·, c=3) = [0.8, 1, 3]
    # row 1 A = +1 → max(-r, -r̂) = [-0.5, -1, -1.2], dual clip does not apply
    out, grad = _run(
        cfg,
        curr=[[0.0, L05, 0.0, L5], [0.0, L05, 0.0, L5]],
        prev=[[0.0] * 4, [0.0] * 4],
        advantages=[[-1.0] * 4, [1.0] * 4],
    )
    _close(out.loss.item(), (0.8 + 1.0 + 3.0 - 0.5 - 1.0 - 1.2) / (6 + EPS))
    _close_t(grad, [[0.0, 0.0, 1.0 / (6 + EPS), 0.0], [0.0, -0.5 / (6 + EPS), -1.0 / (6 + EPS), 0.0]])
    without, _ = _run(NO_KL, curr=[[0.0, L05, 0.0, L5]], prev=[[0.0] * 4], advantages=[[-1.0] * 4])
    _close(without.loss.item(), (0.8 + 1.0 + 5.0) / (3 + EPS))


def test_disable_ppo_ratio_gives_reinforce_on_the_logprob() -> None:
    cfg = LossConfig(reference_policy_kl_penalty=0.0, disable_ppo_ratio=True)
    out, grad = _run(cfg, curr=[[0.0, -1.0, -2.0]], prev=[[0.0, -9.0, -9.0]], advantages=[[0.0, 2.0, 3.0]])
    _close(out.loss.item(), (2.0 * 1.0 + 3.0 * 2.0) / (2 + EPS))  # -Σ A·lp / N
    _close_t(grad, [[0.0, -2.0 / (2 + EPS), -3.0 / (2 + EPS)]])
    _close(out.metrics["probs_ratio"], -3.0 / (2 + EPS))
    assert (out.metrics["probs_ratio_min"], out.metrics["probs_ratio_max"]) == (-2.0, -1.0)


def test_force_on_policy_ratio_is_one_and_prev_is_the_detached_current_logprob() -> None:
    cfg = LossConfig(reference_policy_kl_penalty=0.0, force_on_policy_ratio=True)
    curr = _t([[0.0, -1.0, -2.0]]).requires_grad_()
    tm, sm = _t([[0.0, 1.0, 1.0]]), _t([1.0])
    out = clipped_pg_loss(
        cfg,
        curr_logprobs=curr,
        token_mask=tm,
        sample_mask=sm,
        advantages=_t([[0.0, 2.0, 3.0]]),
        prev_logprobs=None,
        generation_logprobs=_t([[0.0, -1.1, -1.8]]),
        global_valid_tokens=2.0,
        global_valid_seqs=1.0,
    )
    out.loss.backward()
    _close(out.loss.item(), -(2.0 + 3.0) / (2 + EPS))
    _close_t(curr.grad, [[0.0, -2.0 / (2 + EPS), -3.0 / (2 + EPS)]])
    assert (out.metrics["probs_ratio_min"], out.metrics["probs_ratio_max"]) == (1.0, 1.0)
    _close(out.metrics["token_mult_prob_error"], (math.exp(0.1) + math.exp(0.2)) / (2 + EPS))


# --- Importance sampling -------------------------------------------------------------------------

# prev = curr = -2 on trained tokens, so r = 1; w = exp(prev - gen)
W4 = [0.25, 0.5, 2.0, 4.0]
GEN_W4 = [[0.0] + [-2.0 - math.log(w) for w in W4]]
PREV_W4 = [[0.0, -2.0, -2.0, -2.0, -2.0]]


def test_token_importance_weights_multiply_each_token_loss() -> None:
    cfg = LossConfig(reference_policy_kl_penalty=0.0, use_importance_sampling_correction=True)
    gen = [[0.0, math.log(2.0), math.log(0.5), 0.0]]  # w = exp(0 - gen) = [0.5, 2, 1]
    out, grad = _run(cfg, curr=[[0.0] * 4], gen=gen)
    _close(out.loss.item(), -(0.5 + 2.0 + 1.0) / (3 + EPS))
    _close_t(grad, [[0.0, -0.5 / (3 + EPS), -2.0 / (3 + EPS), -1.0 / (3 + EPS)]])
    _close(out.metrics["sampling_importance_ratio"], 3.5 / (3 + EPS))


def test_importance_weights_are_reported_but_unused_without_correction() -> None:
    gen = [[0.0, math.log(2.0), math.log(0.5), 0.0]]
    out, grad = _run(NO_KL, curr=[[0.0] * 4], gen=gen)
    _close(out.loss.item(), -3.0 / (3 + EPS))
    _close_t(grad, [[0.0, -1.0 / (3 + EPS), -1.0 / (3 + EPS), -1.0 / (3 + EPS)]])
    _close(out.metrics["sampling_importance_ratio"], 3.5 / (3 + EPS))


def test_importance_weight_is_zero_where_it_overflows() -> None:
    cfg = LossConfig(reference_policy_kl_penalty=0.0, use_importance_sampling_correction=True)
    out, grad = _run(cfg, curr=[[0.0, -1.0, -1.0]], gen=[[0.0, -math.inf, -1.0]])  # w = [0 (was inf), 1]
    _close(out.loss.item(), -1.0 / (2 + EPS))
    _close_t(grad, [[0.0, 0.0, -1.0 / (2 + EPS)]])
    _close(out.metrics["sampling_importance_ratio"], 1.0 / (2 + EPS))


@pytest.mark.parametrize(
    ("kind", "lo", "truncated", "n_oob"),
    [
        ("tis", None, [0.25, 0.5, 2.0, 3.0], 1),  # clamp to [0, 3]
        ("tis", 0.4, [0.4, 0.5, 2.0, 3.0], 2),  # clamp to [0.4, 3]
        ("icepop", 0.4, [0.0, 0.5, 2.0, 0.0], 2),  # zero outside [0.4, 3]
    ],
)
def test_token_truncation_variants_bound_the_importance_weights(
    kind: str, lo: float | None, truncated: list[float], n_oob: int
) -> None:
    cfg = LossConfig(
        reference_policy_kl_penalty=0.0,
        use_importance_sampling_correction=True,
        truncated_importance_sampling_type=kind,
        truncated_importance_sampling_ratio=3.0,
        truncated_importance_sampling_ratio_min=lo,
    )
    out, grad = _run(cfg, curr=PREV_W4, prev=PREV_W4, gen=GEN_W4)
    _close(out.loss.item(), -sum(truncated) / (4 + EPS))
    _close_t(grad, [[0.0] + [-w / (4 + EPS) for w in truncated]])
    _close(out.metrics["sampling_importance_ratio"], sum(truncated) / (4 + EPS))
    _close(out.metrics["is_oob_ratio"], n_oob / (4 + EPS))


def test_seq_mask_tis_drops_whole_sequences_by_geometric_mean_weight() -> None:
    cfg = LossConfig(
        reference_policy_kl_penalty=0.0,
        use_importance_sampling_correction=True,
        truncated_importance_sampling_type="seq-mask-tis",
        truncated_importance_sampling_ratio=3.0,
        truncated_importance_sampling_ratio_min=0.4,
    )
    # row 0: w = [0.5, 2], geometric mean 1 → kept with raw weights; row 1: w = [4, 4], mean 4 → dropped
    prev = [[0.0, -2.0, -2.0], [0.0, -2.0, -2.0]]
    gen = [[0.0, -2.0 - math.log(0.5), -2.0 - math.log(2.0)], [0.0, -2.0 - math.log(4.0), -2.0 - math.log(4.0)]]
    out, grad = _run(cfg, curr=prev, prev=prev, gen=gen)
    _close(out.loss.item(), -(0.5 + 2.0) / (4 + EPS))
    _close_t(grad, [[0.0, -0.5 / (4 + EPS), -2.0 / (4 + EPS)], [0.0, 0.0, 0.0]])
    _close(out.metrics["is_oob_ratio"], 1.0 / (2 + EPS))  # one of two sequences, sequence-normalised
    _close(out.metrics["sampling_importance_ratio"], 2.5 / (4 + EPS))


# --- KL penalty ----------------------------------------------------------------------------------

# curr = -1, ref = [-2, 0, -31] → x = ref - curr = [-1, 1, -30]; the input clamp makes the last -20
KL_CURR = [[0.0, -1.0, -1.0, -1.0]]
KL_REF = [[0.0, -2.0, 0.0, -31.0]]
E = math.e


@pytest.mark.parametrize(
    ("kl_type", "per_token", "grad"),
    [
        # k1 = -x → [1, -1, 20 → output clamp 10]; d(w·k)/d lp = k + 1 (w = exp(lp - sg(lp)))
        ("k1", [1.0, -1.0, 10.0], [2.0, 0.0, 0.0]),
        # k2 = x²/2 → [0.5, 0.5, 200 → 10]; gradient k - x
        ("k2", [0.5, 0.5, 10.0], [1.5, -0.5, 0.0]),
        # k3 = eˣ - 1 - x → [e⁻¹, e - 2, 19 + e⁻²⁰ → 10]; gradient -x
        ("k3", [1.0 / E, E - 2.0, 10.0], [1.0, -1.0, 0.0]),
    ],
)
def test_kl_penalty_estimators_with_input_and_output_clamps(kl_type: str, per_token: list[float], grad: list[float]) -> None:
    beta = 0.5
    cfg = LossConfig(reference_policy_kl_penalty=beta, reference_policy_kl_type=kl_type)
    out, g = _run(cfg, curr=KL_CURR, ref=KL_REF, advantages=[[0.0] * 4])  # A = 0: the loss is the KL term
    _close(out.loss.item(), beta * sum(per_token) / (3 + EPS))
    _close(out.metrics["kl_penalty"], sum(per_token) / (3 + EPS))
    _close_t(g, [[0.0] + [beta * v / (3 + EPS) for v in grad]])


def test_kl_weight_is_detached_where_the_input_clamp_bites() -> None:
    cfg = LossConfig(reference_policy_kl_penalty=1.0, kl_output_clamp_value=None)
    # x = [-30 → -20, 25 → 20, -1]: k3 = [19 + e⁻²⁰, e²⁰ - 21, e⁻¹]; clamped tokens get no gradient at all
    out, g = _run(cfg, curr=[[0.0, -1.0, -1.0, -1.0]], ref=[[0.0, -31.0, 24.0, -2.0]], advantages=[[0.0] * 4])
    _close(out.loss.item(), (19.0 + math.exp(-20.0) + math.exp(20.0) - 21.0 + 1.0 / E) / (3 + EPS))
    _close_t(g, [[0.0, 0.0, 0.0, 1.0 / (3 + EPS)]])


def test_kl_is_off_and_reference_optional_when_penalty_is_zero() -> None:
    out, _ = _run(NO_KL, curr=KL_CURR, advantages=[[0.0] * 4])
    assert out.loss.item() == 0.0
    assert out.metrics["kl_penalty"] == 0.0


def test_loss_is_actor_loss_plus_kl_term() -> None:
    cfg = LossConfig(reference_policy_kl_penalty=0.5, reference_policy_kl_type="k3")
    out, _ = _run(cfg, curr=KL_CURR, ref=KL_REF)  # A = 1, r = 1: actor = -3/N
    _close(out.metrics["actor_loss"], -3.0 / (3 + EPS))
    _close(out.metrics["loss"], -3.0 / (3 + EPS) + 0.5 * (1.0 / E + E - 2.0 + 10.0) / (3 + EPS))
    assert out.metrics["loss"] == out.loss.item()


# --- Mismatch metrics ----------------------------------------------------------------------------


def test_token_mult_prob_error_is_n_over_n_plus_eps_when_gen_equals_prev() -> None:
    out, _ = _run(NO_KL, curr=[[0.0, -0.3, -1.7, -0.01]])  # gen = prev = curr
    assert out.metrics["token_mult_prob_error"] == 3.0 / (3.0 + EPS)  # exactly; 1 - 3.3e-9
    assert out.metrics["sampling_importance_ratio"] == 3.0 / (3.0 + EPS)
    assert out.metrics["gen_kl_error"] == 0.0
    assert out.metrics["policy_kl_error"] == 0.0
    assert abs(out.metrics["js_divergence_error"]) < 1e-30


def test_mismatch_metrics_follow_the_documented_formulas() -> None:
    cfg = LossConfig(reference_policy_kl_penalty=0.0)
    prev, gen = [[0.0, -1.0, -2.0]], [[0.0, -1.1, -1.8]]
    out, _ = _run(cfg, curr=prev, prev=prev, gen=gen)
    n = 2 + EPS
    _close(out.metrics["token_mult_prob_error"], (math.exp(0.1) + math.exp(0.2)) / n)
    k3 = lambda x: math.exp(x) - 1 - x  # noqa: E731
    _close(out.metrics["gen_kl_error"], (k3(0.1) + k3(-0.2)) / n)  # x = prev - gen
    _close(out.metrics["policy_kl_error"], (k3(-0.1) + k3(0.2)) / n)  # x = gen - prev

    def js(p: float, g: float) -> float:
        log_m = math.log(0.5 * math.exp(p) + 0.5 * math.exp(g))
        a, b = p - log_m, g - log_m
        return 0.5 * (math.exp(a) - a - 1) + 0.5 * (math.exp(b) - b - 1)

    _close(out.metrics["js_divergence_error"], (js(-1.0, -1.1) + js(-2.0, -1.8)) / n)
    _close(out.metrics["approx_entropy"], (math.exp(0.1) * 1.0 + math.exp(-0.2) * 2.0) / n)  # -Σ e^(lp-gen)·lp / N


def test_mismatch_metrics_use_the_configured_kl_type() -> None:
    cfg = LossConfig(reference_policy_kl_penalty=0.0, reference_policy_kl_type="k2")
    prev, gen = [[0.0, -1.0, -2.0]], [[0.0, -1.1, -1.8]]
    out, _ = _run(cfg, curr=prev, prev=prev, gen=gen)
    _close(out.metrics["gen_kl_error"], (0.5 * 0.1**2 + 0.5 * 0.2**2) / (2 + EPS))
    _close(out.metrics["policy_kl_error"], (0.5 * 0.1**2 + 0.5 * 0.2**2) / (2 + EPS))  # k2 is symmetric in x
    k1 = LossConfig(reference_policy_kl_penalty=0.0, reference_policy_kl_type="k1")
    out, _ = _run(k1, curr=prev, prev=prev, gen=gen)
    _close(out.metrics["gen_kl_error"], (-0.1 + 0.2) / (2 + EPS))  # -x, x = prev - gen
    _close(out.metrics["policy_kl_error"], (0.1 - 0.2) / (2 + EPS))  # -x, x = gen - prev


# --- Layout, keys, dtypes ------------------------------------------------------------------------


def test_next_token_logprobs_give_the_same_result_as_own_position_logprobs() -> None:
    cfg = LossConfig(reference_policy_kl_penalty=0.1, use_importance_sampling_correction=True)
    data = _batch(7)
    own = _loss_on(cfg, data, rows=list(range(6)))
    shifted = dict(data, curr=data["curr"][:, 1:].detach().clone().requires_grad_())
    nxt = _loss_on(cfg, shifted, rows=list(range(6)))
    assert own.metrics == nxt.metrics
    assert torch.equal(own.loss, nxt.loss)


def test_metric_keys_follow_metric_keys_and_is_oob_ratio_only_with_truncation() -> None:
    plain, _ = _run(NO_KL, curr=[[0.0, -1.0]])
    assert tuple(plain.metrics) == tuple(k for k in METRIC_KEYS if k != "is_oob_ratio")
    cfg = LossConfig(
        reference_policy_kl_penalty=0.0,
        use_importance_sampling_correction=True,
        truncated_importance_sampling_type="tis",
        truncated_importance_sampling_ratio=2.0,
    )
    truncated, _ = _run(cfg, curr=[[0.0, -1.0]])
    assert tuple(truncated.metrics) == METRIC_KEYS


def test_low_precision_logprobs_are_computed_in_float32() -> None:
    curr = torch.tensor([[0.0, -1.0, -2.0]], dtype=torch.bfloat16, requires_grad=True)
    out = clipped_pg_loss(
        NO_KL,
        curr_logprobs=curr,
        token_mask=_t([[0.0, 1.0, 1.0]]),
        sample_mask=_t([1.0]),
        advantages=_t([[1.0, 1.0, 1.0]]),
        prev_logprobs=curr.detach().to(F64),
        generation_logprobs=curr.detach().to(F64),
        global_valid_tokens=2.0,
        global_valid_seqs=1.0,
    )
    assert out.loss.dtype == torch.float32
    out.loss.backward()
    assert curr.grad is not None and curr.grad.dtype == torch.bfloat16


def test_empty_microbatch_contributes_zero_and_neutral_extrema() -> None:
    out, grad = _run(NO_KL, curr=[[0.0, -1.0, -2.0]], sample_mask=[0.0])
    assert out.loss.item() == 0.0
    assert torch.count_nonzero(grad) == 0
    assert out.metrics["probs_ratio_min"] == math.inf and out.metrics["probs_ratio_max"] == -math.inf
    assert out.metrics["num_valid_samples"] == 0.0
    other, _ = _run(NO_KL, curr=[[0.0, L05, L15]], prev=[[0.0] * 3])
    combined = combine_metrics([out.metrics, other.metrics])
    _close(combined["probs_ratio_min"], 0.5)
    _close(combined["probs_ratio_max"], 1.5)


# --- Global normalisation, padding, poisoned positions -------------------------------------------


def _batch(seed: int, rows: int = 6, seq: int = 7) -> dict[str, torch.Tensor]:
    """A deterministic own-position batch with prompts, ragged lengths and masked rows."""
    g = rng(seed, "test_loss_batch")
    prev = torch.from_numpy(-g.uniform(0.05, 3.0, size=(rows, seq)))
    noise = lambda: torch.from_numpy(g.normal(0.0, 0.3, size=(rows, seq)))  # noqa: E731
    prompt = g.integers(1, 3, size=rows)
    length = g.integers(4, seq + 1, size=rows)
    token_mask = torch.from_numpy(
        np.array([[1.0 if prompt[i] <= t < length[i] else 0.0 for t in range(seq)] for i in range(rows)])
    )
    token_mask[2] = 0.0  # a row with no trained token
    sample_mask = torch.ones(rows, dtype=F64)
    sample_mask[4] = 0.0  # a filtered row
    adv = torch.from_numpy(g.normal(0.0, 1.0, size=(rows, 1))).expand(rows, seq).clone()
    return {
        "curr": (prev + noise()).requires_grad_(),
        "prev": prev,
        "gen": prev + noise(),
        "ref": prev + noise(),
        "adv": adv,
        "token_mask": token_mask,
        "sample_mask": sample_mask,
    }


def _loss_on(cfg: LossConfig, data: dict[str, torch.Tensor], rows: list[int], n: ValidCounts | None = None) -> LossOutput:
    """The loss of `rows` of `data` as one microbatch, normalised by `n` (default: those rows alone)."""
    idx = torch.tensor(rows, dtype=torch.long)
    tm, sm = data["token_mask"][idx], data["sample_mask"][idx]
    n = n if n is not None else valid_counts(tm, sm)
    return clipped_pg_loss(
        cfg,
        curr_logprobs=data["curr"][idx],
        token_mask=tm,
        sample_mask=sm,
        advantages=data["adv"][idx],
        prev_logprobs=data["prev"][idx],
        generation_logprobs=data["gen"][idx],
        reference_logprobs=data["ref"][idx],
        global_valid_tokens=n.tokens,
        global_valid_seqs=n.seqs,
    )


CONFIGS = {
    "ppo-kl-tis-dual": LossConfig(
        ratio_clip_c=1.5,  # binds on this batch: some A < 0 tokens have r > 1.5
        reference_policy_kl_penalty=0.05,
        use_importance_sampling_correction=True,
        truncated_importance_sampling_type="tis",
        truncated_importance_sampling_ratio=1.2,
    ),
    "icepop-k1": LossConfig(
        reference_policy_kl_type="k1",
        use_importance_sampling_correction=True,
        truncated_importance_sampling_type="icepop",
        truncated_importance_sampling_ratio=1.3,
        truncated_importance_sampling_ratio_min=0.7,
    ),
    "seq-mask-tis-k2": LossConfig(
        reference_policy_kl_type="k2",
        use_importance_sampling_correction=True,
        truncated_importance_sampling_type="seq-mask-tis",
        truncated_importance_sampling_ratio=1.1,
        truncated_importance_sampling_ratio_min=0.9,
    ),
    "reinforce": LossConfig(disable_ppo_ratio=True),
    "on-policy": LossConfig(force_on_policy_ratio=True),
}

# dp = 2 ranks take interleaved rows; each rank splits its shard into microbatches of 2 and 1
DP_MICROBATCHES = [[0, 2], [4], [1, 3], [5]]


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_microbatches_and_dp_shards_sum_to_the_single_batch_loss_and_gradient(name: str) -> None:
    cfg = CONFIGS[name]
    whole_data, split_data = _batch(11), _batch(11)
    whole = _loss_on(cfg, whole_data, rows=list(range(6)))
    whole.loss.backward()

    n = valid_counts(split_data["token_mask"], split_data["sample_mask"])
    parts = []
    for rows in DP_MICROBATCHES:
        part = _loss_on(cfg, split_data, rows, n=n)
        part.loss.backward()  # accumulate into the shared leaf, as a trainer does
        parts.append(part)

    assert math.fsum(p.loss.item() for p in parts) == pytest.approx(whole.loss.item(), abs=1e-12)
    torch.testing.assert_close(split_data["curr"].grad, whole_data["curr"].grad, rtol=0, atol=1e-12)
    combined = combine_metrics([p.metrics for p in parts])
    assert combined.keys() == whole.metrics.keys()
    for key, value in whole.metrics.items():
        assert combined[key] == pytest.approx(value, abs=1e-12), key
    assert whole.loss.item() != 0.0 and torch.count_nonzero(whole_data["curr"].grad) > 0


def test_valid_counts_of_microbatches_add_up_to_the_whole_batch() -> None:
    data = _batch(11)
    parts = [valid_counts(data["token_mask"][rows], data["sample_mask"][rows]) for rows in DP_MICROBATCHES]
    total = parts[0] + parts[1] + parts[2] + parts[3]
    assert total == valid_counts(data["token_mask"], data["sample_mask"])
    # row 4 is filtered; row 2 has no trained token but still counts as a sequence
    assert total.seqs == 5.0


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_padding_rows_with_zero_sample_mask_change_nothing(name: str) -> None:
    cfg = CONFIGS[name]
    base, padded = _batch(5, rows=6), _batch(5, rows=6)
    padded["sample_mask"][:] = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 0.0], dtype=F64)
    base["sample_mask"][:] = padded["sample_mask"]
    base_out = _loss_on(cfg, base, rows=[0, 1, 2, 3])
    padded_out = _loss_on(cfg, padded, rows=[0, 1, 2, 3, 4, 5])
    base_out.loss.backward()
    padded_out.loss.backward()
    assert padded_out.loss.item() == pytest.approx(base_out.loss.item(), abs=1e-15)
    for key, value in base_out.metrics.items():
        assert padded_out.metrics[key] == pytest.approx(value, abs=1e-15), key
    torch.testing.assert_close(padded["curr"].grad[:4], base["curr"].grad[:4], rtol=0, atol=1e-15)
    assert torch.count_nonzero(padded["curr"].grad[4:]) == 0


def test_rows_without_trained_tokens_change_only_num_valid_samples() -> None:
    cfg = CONFIGS["ppo-kl-tis-dual"]
    data = _batch(5, rows=6)
    data["token_mask"][5] = 0.0
    data["sample_mask"][4] = 1.0
    data["token_mask"][4] = 0.0
    base = _loss_on(cfg, data, rows=[0, 1, 2, 3])
    with_empty_rows = _loss_on(cfg, data, rows=[0, 1, 2, 3, 4, 5])
    for key, value in base.metrics.items():
        expected = value + 2.0 if key == "num_valid_samples" else value
        assert with_empty_rows.metrics[key] == pytest.approx(expected, abs=1e-15), key


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_inf_and_nan_at_untrained_positions_do_not_poison_loss_gradient_or_metrics(name: str) -> None:
    cfg = CONFIGS[name]
    clean, poisoned = _batch(3), _batch(3)
    untrained = (poisoned["token_mask"] * poisoned["sample_mask"][:, None]) == 0  # (B, S), column 0 included
    with torch.no_grad():
        poisoned["curr"][untrained] = -math.inf
    poisoned["prev"][untrained] = math.nan
    poisoned["gen"][untrained] = math.inf
    poisoned["ref"][untrained] = math.nan
    poisoned["adv"][untrained] = math.nan
    clean_out = _loss_on(cfg, clean, rows=list(range(6)))
    poisoned_out = _loss_on(cfg, poisoned, rows=list(range(6)))
    clean_out.loss.backward()
    poisoned_out.loss.backward()
    assert torch.equal(poisoned_out.loss, clean_out.loss)
    assert poisoned_out.metrics == clean_out.metrics
    assert torch.equal(poisoned["curr"].grad, clean["curr"].grad)
    assert torch.count_nonzero(poisoned["curr"].grad[untrained]) == 0


# --- combine_metrics ------------------------------------------------------------------------------


def test_combine_metrics_sums_means_and_takes_extrema_of_min_max_keys() -> None:
    a = {"loss": 0.25, "probs_ratio_min": 0.5, "probs_ratio_max": 1.5, "num_valid_samples": 2.0}
    b = {"loss": 0.5, "probs_ratio_min": math.inf, "probs_ratio_max": 2.0, "num_valid_samples": 0.0}
    assert combine_metrics([a, b]) == {
        "loss": 0.75,
        "probs_ratio_min": 0.5,
        "probs_ratio_max": 2.0,
        "num_valid_samples": 2.0,
    }


def test_combine_metrics_does_not_depend_on_microbatch_order() -> None:
    parts = [{"loss": v} for v in (1e16, 1.0, -1e16, 1e-3)]
    assert combine_metrics(parts) == combine_metrics(parts[::-1]) == {"loss": 1.001}
