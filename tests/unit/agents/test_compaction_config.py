"""Compaction configs keep Gym's names, defaults and error messages; ours fail loudly the same way."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from compactsim.agents.compaction.config import (CompactionScheduleConfig, ContextGuardConfig, ContextHistoryConfig,
                                                HistoryPolicyConfig, SummaryPolicyConfig)
from compactsim.agents.compaction.policies import build_policy
from compactsim.harness.core.digests import stable_id


def _error(fn, *args, **kwargs) -> str:
    with pytest.raises(ValidationError) as exc:
        fn(*args, **kwargs)
    return exc.value.errors()[0]["msg"]


def test_recency_without_any_kind_is_rejected_with_gyms_message():
    msg = _error(HistoryPolicyConfig.model_validate, {"type": "recency", "config": {}})
    assert msg == "Value error, The recency policy requires images.enabled or reasoning.enabled"


def test_image_settings_while_disabled_are_rejected_with_gyms_message():
    msg = _error(HistoryPolicyConfig.model_validate, {"type": "recency", "config": {
        "reasoning": {"enabled": True}, "images": {"keep_last_groups": 2}}})
    assert msg == "Value error, Image recency settings require images.enabled=true: configured=['keep_last_groups']"


def test_reasoning_settings_while_disabled_are_rejected_with_gyms_message():
    msg = _error(HistoryPolicyConfig.model_validate, {"type": "recency", "config": {
        "images": {"enabled": True}, "reasoning": {"keep_first_block": True}}})
    assert msg == "Value error, Reasoning recency settings require reasoning.enabled=true: configured=['keep_first_block']"


def test_rolling_schedule_requires_one_action_per_chunk():
    msg = _error(CompactionScheduleConfig, type="rolling_recency", actions_per_chunk=2)
    assert msg == "Value error, rolling_recency requires actions_per_chunk=1"


def test_unknown_policy_is_rejected_listing_the_available_ones():
    msg = _error(HistoryPolicyConfig.model_validate, {"type": "bogus"})
    assert msg == ("Value error, Unknown history policy 'bogus'; available policies: "
                   "['identity', 'recency', 'summary', 'think_strip', 'tool_output_truncation']")


def test_unknown_config_key_is_rejected_by_name():
    with pytest.raises(ValidationError, match="keep_last"):
        HistoryPolicyConfig.model_validate({"type": "think_strip", "config": {"keep_last": 2}})


def test_summary_trigger_turns_must_increase_from_two():
    msg = _error(HistoryPolicyConfig.model_validate, {"type": "summary", "config": {"at_turns": [4, 2]}})
    assert msg == "Value error, summary at_turns must be strictly increasing turns >= 2: at_turns=[4, 2]"


def test_guards_are_refused_rather_than_silently_ignored():
    msg = _error(ContextGuardConfig, max_active_images=2)
    assert msg == "Value error, context guards are not supported by compactsim's scripted agents"


def test_vision_guard_requires_projection_with_gyms_message():
    msg = _error(ContextGuardConfig, max_vision_tokens=10)
    assert msg == "Value error, max_vision_tokens requires projected_vision_tokens_per_image"


def test_compaction_policy_id_matches_the_reference_example(example_transport):
    config = ContextHistoryConfig.model_validate(
        {"policy": {"type": "recency", "config": {"reasoning": {"enabled": True, "keep_last_blocks": 1}}}})
    expected = example_transport["context_compaction_contract"]["generation_contract"]["compaction_policy_id"]
    assert stable_id("compaction-policy", config.model_dump(mode="json")) == expected
    policy = build_policy(config.policy)
    assert (policy.name, policy.version) == ("recency", "2")
    assert policy.config_digest == example_transport["boundary_events"][0]["config_digest"]


def test_a_disabled_history_is_refused_as_config_not_when_a_session_starts():
    """Gym's session refuses `enabled: false` when a rollout starts; here the config itself does (no compaction is
    `identity`), so a scenario file names the field instead of failing mid-run."""
    with pytest.raises(ValidationError, match="enabled"):
        ContextHistoryConfig(enabled=False)


@pytest.mark.parametrize("text", ["{foo}", "{0}", "turns {first_turn}-{last_turn} {", "{first_turn.x}"])
def test_a_summary_text_with_other_placeholders_is_refused(text: str):
    with pytest.raises(ValidationError, match="only {first_turn} and {last_turn}"):
        SummaryPolicyConfig(text=text)
    assert SummaryPolicyConfig(text="{{kept}} turns {first_turn}-{last_turn}").text


def test_dumped_configs_validate_again():
    from compactsim.agents.compaction.presets import PRESETS, policy_preset

    for name in PRESETS:
        config = policy_preset(name)
        again = ContextHistoryConfig.model_validate(config.model_dump(mode="json"))
        assert again.model_dump(mode="json") == config.model_dump(mode="json")
