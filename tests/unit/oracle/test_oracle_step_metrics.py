"""The oracle's loss metrics (nemo-rl-semantics §4.6), checked against numbers worked out by hand.

Probabilities are powers of two so every per-token quantity has a closed form. Rows (trained tokens):

    A: prev = log[1/2, 1/4], gen = log[1/4, 1/2]   w = [2, 1/2]   sample_mask 1
    B: prev = log[1/2],      gen = log[1/2]        w = [1]        sample_mask 1
    D: prev = log[1/2],      gen = log[1/4]        w = [2]        sample_mask 1
    Z: prev = [-1],          gen = [-3]            w = [e²]       sample_mask 0 (must add nothing)

so N_tok = 4 and N_seq = 3; every mean divides by N + 1e-8 (NeMo-RL's masked_mean).
"""

from __future__ import annotations

import math

import pytest
import torch

from compactsim.harness.oracle.step_metrics import RowTokens, loss_metrics
from compactsim.harness.oracle.step_settings import LossSettings

LN2 = math.log(2.0)
EPS = 1e-8


def _row(prev: list[float], gen: list[float], sample_mask: float = 1.0) -> RowTokens:
    return RowTokens(torch.tensor(prev, dtype=torch.float64), torch.tensor(gen, dtype=torch.float64), sample_mask)


A = _row([math.log(0.5), math.log(0.25)], [math.log(0.25), math.log(0.5)])
B = _row([math.log(0.5)], [math.log(0.5)])
D = _row([math.log(0.5)], [math.log(0.25)])
Z = _row([-1.0], [-3.0], sample_mask=0.0)
ROWS = [A, B, D, Z]
TOK = 4 + EPS
SEQ = 3 + EPS


def _metrics(**settings: object):
    return loss_metrics(ROWS, LossSettings(**settings), n_tokens=4.0, n_seqs=3.0)  # type: ignore[arg-type]


def test_default_ppo_metrics_by_hand():
    m = _metrics()
    # r = exp(lp − prev) = 1 on every trained token (the oracle's prev is its own lp); r̂ = clamp(1) = 1
    assert m.probs_ratio == m.probs_ratio_clamped == 4 / TOK
    assert (m.probs_ratio_min, m.probs_ratio_max, m.probs_ratio_clamped_min, m.probs_ratio_clamped_max) == (1, 1, 1, 1)
    # w = exp(prev − gen) = 2 + 1/2 + 1 + 2 (Z's e² is masked out)
    assert m.sampling_importance_ratio == 5.5 / TOK
    # k3 with x = prev − gen: A gives (e^ln2 − 1 − ln2) + (e^−ln2 − 1 + ln2) = 1/2, D gives 1 − ln2
    assert m.gen_kl_error == pytest.approx((1.5 - LN2) / TOK, rel=1e-15)
    # k3 with x = gen − prev: A again 1/2, D gives 1/2 − 1 + ln2
    assert m.policy_kl_error == pytest.approx((LN2) / TOK, rel=1e-15)
    # JS of (1/2, 1/4): M = 3/8, a = ln(4/3), b = ln(2/3); ½(1/3 − ln 4/3) + ½(−1/3 − ln 2/3) = ½ ln(9/8) per such token
    assert m.js_divergence_error == pytest.approx(1.5 * math.log(9 / 8) / TOK, rel=1e-14)
    # −Σ exp(lp − gen)·lp = −(2·(−ln2) + ½·(−2ln2) + 1·(−ln2) + 2·(−ln2)) = 6 ln2
    assert m.approx_entropy == pytest.approx(6 * LN2 / TOK, rel=1e-15)
    assert m.is_oob_ratio is None  # no truncation: NeMo-RL reports no is_oob_ratio
    assert m.num_valid_samples == 3.0


def test_kl_estimators_k1_and_k2_by_hand():
    k1 = _metrics(reference_policy_kl_type="k1")
    assert k1.gen_kl_error == pytest.approx(-LN2 / TOK, rel=1e-15)  # −Σ(prev − gen) = −(0 + 0 + ln2)
    assert k1.policy_kl_error == pytest.approx(LN2 / TOK, rel=1e-15)
    k2 = _metrics(reference_policy_kl_type="k2")
    assert k2.gen_kl_error == k2.policy_kl_error == pytest.approx(1.5 * LN2**2 / TOK, rel=1e-15)  # ½x² over ±ln2, ±ln2, ln2


def test_disable_ppo_ratio_reports_the_logprobs_themselves_and_their_extrema():
    m = _metrics(disable_ppo_ratio=True)
    assert m.probs_ratio == m.probs_ratio_clamped == pytest.approx(-5 * LN2 / TOK, rel=1e-15)  # −ln2 −2ln2 −ln2 −ln2
    assert (m.probs_ratio_min, m.probs_ratio_max) == (math.log(0.25), math.log(0.5))
    assert (m.probs_ratio_clamped_min, m.probs_ratio_clamped_max) == (math.log(0.25), math.log(0.5))
    forced = _metrics(force_on_policy_ratio=True)
    assert forced.probs_ratio == 4 / TOK and forced.probs_ratio_max == 1.0


def test_icepop_zeroes_out_of_bounds_tokens_and_reports_their_token_share():
    m = _metrics(use_importance_sampling_correction=True, truncated_importance_sampling_type="icepop",
                 truncated_importance_sampling_ratio=1.5, truncated_importance_sampling_ratio_min=0.6)
    assert m.sampling_importance_ratio == 1.0 / TOK  # only B's w = 1 is inside [0.6, 1.5]
    assert m.is_oob_ratio == 3.0 / TOK  # A's 2 and 1/2, D's 2 (Z is masked out)


def test_tis_clamps_and_counts_both_bounds_and_a_missing_lower_bound_is_zero():
    both = _metrics(use_importance_sampling_correction=True, truncated_importance_sampling_type="tis",
                    truncated_importance_sampling_ratio=1.5, truncated_importance_sampling_ratio_min=0.6)
    assert both.sampling_importance_ratio == pytest.approx((1.5 + 0.6 + 1 + 1.5) / TOK, rel=1e-15)
    assert both.is_oob_ratio == 3.0 / TOK
    upper = _metrics(use_importance_sampling_correction=True, truncated_importance_sampling_type="tis",
                     truncated_importance_sampling_ratio=1.5)
    assert upper.sampling_importance_ratio == pytest.approx((1.5 + 0.5 + 1 + 1.5) / TOK, rel=1e-15)
    assert upper.is_oob_ratio == 2.0 / TOK  # 1/2 is inside [0, 1.5]


def test_seq_mask_tis_drops_whole_rows_and_reports_the_share_of_sequences():
    m = _metrics(use_importance_sampling_correction=True, truncated_importance_sampling_type="seq-mask-tis",
                 truncated_importance_sampling_ratio=1.1, truncated_importance_sampling_ratio_min=0.9)
    # geometric means: A exp((ln2 − ln2)/2) = 1 kept (raw weights), B 1 kept, D 2 dropped; Z (e², masked) ignored
    assert m.sampling_importance_ratio == 3.5 / TOK
    assert m.is_oob_ratio == 1.0 / SEQ  # normalised by sequences, not tokens


def test_a_step_without_trained_tokens_keeps_infinite_extrema_and_zero_means():
    empty = torch.zeros(0, dtype=torch.float64)
    m = loss_metrics([Z, RowTokens(empty, empty, 1.0)], LossSettings(truncated_importance_sampling_type="icepop",
                     truncated_importance_sampling_ratio=1.5, truncated_importance_sampling_ratio_min=0.5,
                     use_importance_sampling_correction=True), n_tokens=0.0, n_seqs=1.0)
    assert (m.probs_ratio_min, m.probs_ratio_max) == (math.inf, -math.inf)
    assert (m.probs_ratio_clamped_min, m.probs_ratio_clamped_max) == (math.inf, -math.inf)
    assert (m.probs_ratio, m.sampling_importance_ratio, m.is_oob_ratio, m.approx_entropy) == (0.0, 0.0, 0.0, 0.0)
    assert m.num_valid_samples == 1.0


def test_a_fractional_sample_mask_weights_the_sums_but_not_the_extrema():
    half = _row([math.log(0.25)], [math.log(0.5)], sample_mask=0.5)
    m = loss_metrics([B, half], LossSettings(disable_ppo_ratio=True), n_tokens=1.5, n_seqs=1.5)
    assert m.probs_ratio == pytest.approx((-LN2 - 0.5 * 2 * LN2) / (1.5 + EPS), rel=1e-15)
    assert m.probs_ratio_min == math.log(0.25)
    assert m.sampling_importance_ratio == pytest.approx((1 + 0.5 * 0.5) / (1.5 + EPS), rel=1e-15)
