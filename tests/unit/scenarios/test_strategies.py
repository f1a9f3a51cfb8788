"""Hypothesis strategies: bounds are checked before anything is built, and drawn values are valid."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from compactsim.harness.core.errors import ConfigError
from compactsim.scenarios.model import Scenario, ScriptSpec
from compactsim.scenarios.strategies import (
    adversarial_scenarios,
    compaction_schedules,
    media,
    mutations,
    rewards,
    rollouts,
    scenarios,
    turns,
)
from compactsim.agents.compaction.presets import policy_preset


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: media(min_images=3, max_images=1), "min_images=3 > max_images=1"),
        (lambda: media(max_images=99), "max_images=99: expected an int in [0, 8]"),
        (lambda: media(keys=0), "keys=0: expected an int in [1, 64]"),
        (lambda: turns(min_turns=0), "min_turns=0: expected an int in [1, 16]"),
        (lambda: turns(max_turns=1.5), "max_turns=1.5: expected an int"),
        (lambda: turns(max_images_per_observation=9), "max_images_per_observation=9"),
        (lambda: turns(image_keys=True), "image_keys=True"),
        (lambda: compaction_schedules(families=["magic"]), "unknown: ['magic']"),
        (lambda: compaction_schedules(families=[]), "a non-empty subset"),
        (lambda: compaction_schedules(chunked="yes"), "chunked='yes': expected a bool"),
        (lambda: rewards(group_size=0), "group_size=0"),
        (lambda: rollouts(max_overrides=-1), "max_overrides=-1"),
        (lambda: scenarios(min_groups=3, max_groups=2), "min_groups=3 > max_groups=2"),
        (lambda: scenarios(max_group_size=9), "max_group_size=9"),
        (lambda: scenarios(flavours=["gym-9"]), "unknown: ['gym-9']"),
        (lambda: scenarios(flavours=["none"]), "('identity',) when flavours is ('none',)"),
        (lambda: scenarios(name_prefix="Bad Name!"), "name_prefix='Bad Name!'"),
        (lambda: mutations(names=["teleport"]), "unknown: ['teleport']"),
        (lambda: adversarial_scenarios(min_turns=2), "min_turns=2: expected an int in [4, 16]"),
    ],
)
def test_bad_bounds_fail_at_once_naming_the_argument(build, message):
    with pytest.raises(ConfigError) as info:
        build()
    assert info.value.code == "invalid_argument" and message in str(info.value)


@settings(max_examples=25)
@given(compaction_schedules())
def test_compaction_schedules_are_valid_presets(name):
    assert policy_preset(name).enabled


@settings(max_examples=25)
@given(turns(min_turns=2, max_turns=4))
def test_turns_end_with_an_answer_after_tool_calls(script):
    assert isinstance(script, ScriptSpec) and 2 <= len(script.turns) <= 4
    assert all(t.tool_calls for t in script.turns[:-1]) and not script.turns[-1].tool_calls


@settings(max_examples=25)
@given(scenarios(max_groups=2, max_group_size=3))
def test_scenarios_are_valid_and_round_trip(scenario):
    assert isinstance(scenario, Scenario) and scenario.name.startswith("generated-")
    assert Scenario.model_validate(scenario.to_data()) == scenario
    scenario.trainer_config()


@settings(max_examples=25)
@given(adversarial_scenarios())
def test_adversarial_scenarios_declare_their_mutations_code(scenario):
    from compactsim.scenarios.mutations import MUTATIONS_BY_NAME

    assert scenario.expect.verdict == "error"
    assert scenario.expect.code == MUTATIONS_BY_NAME[scenario.mutation.name].code
    if scenario.mutation.name == "unknown_schema_version":
        assert scenario.flavour != "gym-pr2870"
