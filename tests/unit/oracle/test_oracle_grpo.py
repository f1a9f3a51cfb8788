"""The oracle's own GRPO: NeMo-RL's baseline/std definition, hand values."""

from __future__ import annotations

import math

import pytest

from compactsim.harness.oracle.grpo import STD_EPSILON, group_advantages


def test_leave_one_out_matches_nemo_rl_reference_values():
    g = group_advantages([1.0, 2.0, 3.0])
    assert g.baselines == (2.5, 2.0, 1.5)
    assert g.stds == pytest.approx((math.sqrt(0.5), math.sqrt(2.0), math.sqrt(0.5)), rel=1e-15)
    assert g.advantages == pytest.approx((-1.5 / (math.sqrt(0.5) + 1e-6), 0.0, 1.5 / (math.sqrt(0.5) + 1e-6)), rel=1e-15)


def test_group_of_two_under_leave_one_out_has_zero_std_and_is_not_normalised():
    g = group_advantages([1.0, 0.0])
    assert (g.baselines, g.stds, g.advantages) == ((0.0, 1.0), (0.0, 0.0), (1.0, -1.0))


def test_equal_rewards_give_exactly_zero_advantage():
    assert group_advantages([0.7, 0.7, 0.7, 0.7]).advantages == (0.0, 0.0, 0.0, 0.0)
    assert group_advantages([0.1] * 3, leave_one_out=False).stds == (0.0, 0.0, 0.0)


def test_group_of_one_gets_advantage_zero_and_its_reward_as_baseline():
    g = group_advantages([0.25])
    assert (g.baselines, g.stds, g.advantages) == ((0.25,), (0.0,), (0.0,))
    assert group_advantages([]).advantages == ()


def test_plain_baseline_uses_every_reward_and_the_unbiased_std():
    g = group_advantages([1.0, 0.0, 0.0, 0.0], leave_one_out=False)
    std = math.sqrt(0.25)  # mean 0.25, unbiased variance (0.5625 + 3 * 0.0625) / 3
    assert g.baselines == (0.25,) * 4
    assert g.stds == pytest.approx((std,) * 4, rel=1e-15)
    assert g.advantages == pytest.approx((0.75 / (std + STD_EPSILON), -0.25 / (std + STD_EPSILON),
                                          -0.25 / (std + STD_EPSILON), -0.25 / (std + STD_EPSILON)), rel=1e-15)


def test_normalisation_off_leaves_reward_minus_baseline():
    assert group_advantages([1.0, 0.25, 0.0], normalize=False).advantages == (0.875, -0.25, -0.625)


def test_clipping_applies_after_normalisation_and_to_groups_of_one():
    g = group_advantages([1.0, 0.5, 0.0], clip_low=-1.0, clip_high=1.5)
    assert g.advantages == (1.5, 0.0, -1.0)
    assert group_advantages([1.0], clip_low=0.5).advantages == (0.5,)
