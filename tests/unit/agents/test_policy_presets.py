"""Preset names expand to exactly the Gym configs they describe; bad names fail with the reason."""

from __future__ import annotations

import pytest

from compactsim.agents.compaction.presets import PRESETS, policy_preset
from compactsim.harness.core.errors import ConfigError


def test_recency_images_preset_expands_to_gym_config():
    config = policy_preset("recency-images-k2-chunked3")
    assert config.model_dump(mode="json")["policy"] == {"type": "recency", "config": {
        "images": {"enabled": True, "protect_initial_context": True, "keep_last_groups": 2,
                   "omission_marker": "[Earlier image omitted]"},
        "reasoning": {"enabled": False, "keep_first_block": False, "keep_last_blocks": 3}}}
    assert config.schedule.model_dump() == {"type": "turn_chunked_recency", "actions_per_chunk": 3}


def test_combined_recency_preset_enables_both_kinds():
    cfg = policy_preset("recency-images-k1-unprotected-nomarker-reasoning-last2-first").policy.config
    assert (cfg.images.keep_last_groups, cfg.images.protect_initial_context, cfg.images.omission_marker) == (1, False, None)
    assert (cfg.reasoning.keep_last_blocks, cfg.reasoning.keep_first_block) == (2, True)


def test_custom_policy_presets_expand_with_their_numbers():
    assert policy_preset("summary-at3-at6-keep2").policy.config.model_dump() == {
        "at_turns": (3, 6), "keep_last_turns": 2, "text": "[Summary of turns {first_turn}-{last_turn}]"}
    assert policy_preset("tool-output-truncation-max8-keep0").policy.config.model_dump() == {
        "max_chars": 8, "keep_last": 0, "marker": "...[truncated]"}
    assert policy_preset("think-strip-keep0").policy.config.keep_last_turns == 0


@pytest.mark.parametrize("name", PRESETS)
def test_every_listed_preset_is_valid(name):
    assert policy_preset(name).enabled is True


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("bogus", "unknown policy 'bogus'"),
        ("recency", "recency needs -images-k<K> and/or -reasoning-last<K>"),
        ("recency-images-k2-x", "unexpected token 'x'"),
        ("summary-at1", "summary at_turns must be strictly increasing turns >= 2"),
        ("identity-chunked0", "greater than or equal to 1"),
    ],
)
def test_bad_preset_names_fail_with_the_reason(name, reason):
    with pytest.raises(ConfigError) as exc:
        policy_preset(name)
    assert exc.value.code == "invalid_argument"
    assert reason in str(exc.value)


def test_a_number_of_more_than_six_digits_is_refused_in_the_name():
    """A chunk size of 30 digits used to load and fail mid-run at Gym's JSON integer limit."""
    with pytest.raises(ConfigError, match="'chunked9999999': a number in a preset name has at most 6 digits"):
        policy_preset("recency-images-k2-chunked9999999")
    assert policy_preset("recency-images-k2-chunked999999").schedule.actions_per_chunk == 999999
