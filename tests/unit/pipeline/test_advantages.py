"""Logical GRPO advantages: baselines, std normalisation, grouping, mask_sample, errors."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from compactsim.harness.core.errors import ContractError
from compactsim.harness.pipeline.advantages import (
    STD_EPSILON,
    compute_logical_advantages,
    grpo_advantages,
    grpo_baseline_and_std,
)
from compactsim.harness.pipeline.train_config import AdvantageConfig
from tests.unit.pipeline.materializer_builders import make_rollout

SQRT_HALF = math.sqrt(0.5)


def _ev(rid: str, reward: float | None, group: str = "g0", **kw):
    return make_rollout(rid, [[(3, 2)]], group=group, reward=reward, **kw)[0]


def test_leave_one_out_baseline_and_std_match_the_documented_case():
    b, std = grpo_baseline_and_std([1.0, 2.0, 3.0], leave_one_out=True)
    assert b.tolist() == [2.5, 2.0, 1.5]
    np.testing.assert_allclose(std, [SQRT_HALF, math.sqrt(2.0), SQRT_HALF], rtol=0, atol=1e-15)


def test_leave_one_out_advantages_divide_by_std_plus_epsilon():
    adv, _, _ = grpo_advantages([1.0, 2.0, 3.0], leave_one_out=True)
    expected = [-1.5 / (SQRT_HALF + STD_EPSILON), 0.0, 1.5 / (SQRT_HALF + STD_EPSILON)]
    np.testing.assert_allclose(adv, expected, rtol=0, atol=1e-15)


def test_two_samples_without_leave_one_out_give_plus_minus_one_over_sqrt_two():
    adv, b, std = grpo_advantages([0.0, 1.0], leave_one_out=False)
    assert b.tolist() == [0.5, 0.5]
    np.testing.assert_allclose(std, [SQRT_HALF, SQRT_HALF], rtol=0, atol=1e-15)
    np.testing.assert_allclose(adv, [-0.5 / (SQRT_HALF + 1e-6), 0.5 / (SQRT_HALF + 1e-6)], rtol=0, atol=1e-15)


def test_zero_std_leaves_the_raw_difference():
    # leave-one-out with two samples: each baseline is the other reward, std of one value is 0
    adv, b, std = grpo_advantages([0.0, 1.0], leave_one_out=True)
    assert b.tolist() == [1.0, 0.0]
    assert std.tolist() == [0.0, 0.0]
    assert adv.tolist() == [-1.0, 1.0]


def test_equal_rewards_give_exactly_zero_advantage():
    adv, _, std = grpo_advantages([0.1, 0.1, 0.1, 0.1], leave_one_out=True)
    assert adv.tolist() == [0.0, 0.0, 0.0, 0.0]
    assert std.tolist() == [0.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("leave_one_out", [True, False])
def test_group_of_one_sample_gets_zero_advantage(leave_one_out):
    adv, b, std = grpo_advantages([0.7], leave_one_out=leave_one_out)
    assert adv.tolist() == [0.0] and b.tolist() == [0.7] and std.tolist() == [0.0]


def test_normalisation_off_keeps_reward_minus_baseline():
    adv, _, _ = grpo_advantages([1.0, 2.0, 3.0], leave_one_out=True, normalize=False)
    assert adv.tolist() == [-1.5, 0.0, 1.5]


def test_clip_bounds_the_advantage():
    adv, _, _ = grpo_advantages([1.0, 2.0, 3.0], leave_one_out=True, normalize=False, clip_low=-1.0, clip_high=0.5)
    assert adv.tolist() == [-1.0, 0.0, 0.5]


def test_groups_are_keyed_by_group_id_not_by_arrival_position():
    evidence = [
        _ev("a0", 1.0, "task-a", index=0),
        _ev("b0", 0.0, "task-b", index=0),
        _ev("a1", 2.0, "task-a", index=1),
        _ev("b1", 0.0, "task-b", index=1),
        _ev("a2", 3.0, "task-a", index=2),
        _ev("b2", 6.0, "task-b", index=2),
    ]
    logical = compute_logical_advantages(evidence)
    assert logical.rollout_ids == ("a0", "a1", "a2", "b0", "b1", "b2")
    assert logical.group_keys == ("task-a",) * 3 + ("task-b",) * 3
    assert logical.baselines == (2.5, 2.0, 1.5, 3.0, 3.0, 0.0)
    a = 1.5 / (SQRT_HALF + STD_EPSILON)
    b_std = math.sqrt(18.0)
    np.testing.assert_allclose(
        logical.advantages,
        [-a, 0.0, a, -3.0 / (b_std + STD_EPSILON), -3.0 / (b_std + STD_EPSILON), 6.0],
        rtol=0,
        atol=1e-12,
    )


def test_mask_sample_rollouts_still_count_in_the_group_baseline():
    plain = [_ev(f"r{i}", float(i), index=i) for i in range(3)]
    flagged = [plain[0], replace(plain[1], mask_sample=True), plain[2]]
    a = compute_logical_advantages(plain)
    b = compute_logical_advantages(flagged)
    assert a.advantages == b.advantages and a.baselines == b.baselines
    assert b.mask_sample == (False, True, False)


def test_logical_advantages_do_not_depend_on_arrival_order():
    evidence = [_ev(f"r{i}", r, index=i) for i, r in enumerate([0.1, 0.7, 0.2, 0.9, 0.3])]
    forward = compute_logical_advantages(evidence)
    backward = compute_logical_advantages(list(reversed(evidence)))
    assert forward == backward


def test_advantage_of_looks_up_by_rollout_id():
    logical = compute_logical_advantages([_ev("r0", 0.0, index=0), _ev("r1", 1.0, index=1)])
    assert logical.advantage_of("r1") == 1.0 and logical.advantage_of("r0") == -1.0
    with pytest.raises(KeyError, match="'zz' has no logical advantage"):
        logical.advantage_of("zz")


def test_incomplete_group_is_rejected_with_its_size():
    evidence = [_ev("r0", 0.0, "task-a", index=0), _ev("r1", 1.0, "task-a", index=1)]
    with pytest.raises(ContractError) as info:
        compute_logical_advantages(evidence, AdvantageConfig(num_generations_per_prompt=3))
    assert info.value.code == "incomplete_group"
    assert "group 'task-a' has 2 rollout(s) ['r0', 'r1']; num_generations_per_prompt is 3" in str(info.value)


def test_oversized_group_is_rejected():
    evidence = [_ev(f"r{i}", 0.0, "task-a", index=i) for i in range(3)]
    with pytest.raises(ContractError) as info:
        compute_logical_advantages(evidence, AdvantageConfig(num_generations_per_prompt=2))
    assert info.value.code == "oversized_group"
    assert "group 'task-a' has 3 rollouts" in str(info.value)


def test_duplicate_logical_rollout_id_is_rejected():
    with pytest.raises(ContractError) as info:
        compute_logical_advantages([_ev("r0", 0.0), _ev("r0", 1.0)])
    assert info.value.code == "duplicate_logical_rollout_id"
    assert info.value.rollout_id == "r0"
    assert "'r0' ×2" in str(info.value)


def test_missing_reward_is_rejected():
    with pytest.raises(ContractError) as info:
        compute_logical_advantages([_ev("r0", None)])
    assert info.value.code == "malformed_payload"
    assert "the result has no reward" in str(info.value)


def test_non_finite_reward_is_rejected():
    with pytest.raises(ContractError) as info:
        compute_logical_advantages([_ev("r0", float("nan"))])
    assert info.value.code == "malformed_payload"
    assert "reward is nan; expected a finite number" in str(info.value)
