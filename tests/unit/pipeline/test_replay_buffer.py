"""Async GRPO's replay buffer: gap-first collection targets, FIFO sampling by target, age-based eviction."""

from __future__ import annotations

import pytest

from compactsim.harness.core.errors import ConfigError
from compactsim.harness.pipeline.replay_buffer import BufferedGroup, ReplayBuffer


def _group(key: str, generation: int, target: int) -> BufferedGroup:
    return BufferedGroup(key, ({"response": {}, "reward": 1.0},), generation_version=generation, target_version=target)


def test_collection_targets_fill_the_current_target_first_then_later_ones_within_the_budget():
    buffer = ReplayBuffer().add(_group("a", 0, 0))
    assert buffer.collection_targets(0, max_age_steps=1, groups_per_step=2, budget=3) == (0, 1, 1)
    assert buffer.collection_targets(0, max_age_steps=1, groups_per_step=2, budget=1) == (0,)
    assert buffer.collection_targets(0, max_age_steps=0, groups_per_step=2, budget=5) == (0,)
    assert buffer.collection_targets(0, max_age_steps=2, groups_per_step=2, budget=9) == (0, 1, 1, 2, 2)


def test_sample_takes_groups_for_the_current_version_first_in_first_out():
    buffer = ReplayBuffer().add(_group("a", 0, 1), _group("b", 0, 0), _group("c", 1, 1), _group("d", 1, 1))
    sample, rest = buffer.sample(2, current_version=1, max_age_steps=1)
    assert sample is not None
    assert [g.group_key for g in sample.groups] == ["a", "c"]
    assert sample.ages == (1, 0)
    assert sample.generation_versions == (0, 1)
    assert [g.group_key for g in rest.groups] == ["b", "d"]


def test_sample_waits_when_too_few_groups_target_the_current_version():
    buffer = ReplayBuffer().add(_group("a", 0, 0), _group("b", 0, 1))
    sample, rest = buffer.sample(2, current_version=0, max_age_steps=1)
    assert sample is None
    assert len(rest) == 2


def test_sample_evicts_groups_generated_more_than_max_age_steps_ago():
    buffer = ReplayBuffer().add(_group("old", 0, 3), _group("x", 2, 3), _group("y", 3, 3))
    sample, rest = buffer.sample(2, current_version=3, max_age_steps=1)
    assert sample is not None
    assert [g.group_key for g in sample.evicted] == ["old"]
    assert [g.group_key for g in sample.groups] == ["x", "y"]
    assert len(rest) == 0
    assert sample.to_json()["evicted"] == [
        {"group_key": "old", "num_rollouts": 1, "generation_version": 0, "target_version": 3}
    ]


def test_steady_collection_with_a_partial_head_start_trains_mixed_ages_every_step():
    """Two groups per step, one generated ahead at version 0: every later batch mixes ages 0 and 1."""
    buffer, version, made, ages = ReplayBuffer(), 0, 0, []
    for step in range(5):
        targets = buffer.collection_targets(version, max_age_steps=1, groups_per_step=2, budget=2 + (1 if step == 0 else 0))
        buffer = buffer.add(*(_group(f"g{made + k}", version, t) for k, t in enumerate(targets)))
        made += len(targets)
        sample, buffer = buffer.sample(2, version, max_age_steps=1)
        assert sample is not None
        ages.append(sorted(sample.ages))
        version += 1
    assert ages == [[0, 0], [0, 1], [0, 1], [0, 1], [0, 1]]


def test_add_rejects_a_group_already_buffered():
    buffer = ReplayBuffer().add(_group("a", 0, 0))
    with pytest.raises(ConfigError) as err:
        buffer.add(_group("a", 1, 1))
    assert err.value.code == "invalid_argument"
    assert "group 'a' is already in the replay buffer" in err.value.detail


def test_add_rejects_a_target_before_the_generation_version():
    with pytest.raises(ConfigError) as err:
        ReplayBuffer().add(_group("a", 2, 1))
    assert "target_version=1 precedes its generation_version=2" in err.value.detail


def test_add_rejects_a_group_without_results():
    with pytest.raises(ConfigError) as err:
        ReplayBuffer().add(BufferedGroup("a", (), generation_version=0, target_version=0))
    assert "group 'a' has no rollout results" in err.value.detail


def test_sample_rejects_a_non_positive_group_count():
    with pytest.raises(ConfigError) as err:
        ReplayBuffer().sample(0, current_version=0, max_age_steps=1)
    assert "num_groups=0: expected >= 1" in err.value.detail


@pytest.mark.parametrize("max_age", [0, 1, 2])
def test_eviction_keeps_age_max_age_and_drops_age_max_age_plus_one(max_age: int):
    """The boundary itself: a group exactly `max_age_steps` old still trains, one step older is evicted."""
    current = 5
    buffer = ReplayBuffer().add(_group("too-old", current - max_age - 1, current),
                                _group("oldest-kept", current - max_age, current))
    sample, rest = buffer.sample(1, current_version=current, max_age_steps=max_age)
    assert sample is not None and len(rest) == 0
    assert [g.group_key for g in sample.evicted] == ["too-old"]
    assert [g.group_key for g in sample.groups] == ["oldest-kept"]
    assert sample.ages == (max_age,)
