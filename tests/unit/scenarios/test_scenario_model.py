"""The `Scenario` model: defaults, per-rollout resolution, trainer settings, and every validation error."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from compactsim.harness.core.errors import ConfigError
from compactsim.scenarios.model import RewardsSpec, Scenario, ScriptSpec, TurnsGenerator, deep_merge


def _s(**data) -> Scenario:
    return Scenario.model_validate({"name": "s", "purpose": "a purpose", **data})


def _error(**data) -> str:
    with pytest.raises(ValidationError) as info:
        _s(**data)
    return str(info.value)


def test_defaults_describe_one_group_of_two_identity_rollouts_of_four_calls():
    s = _s()
    assert (s.groups, s.group_size, s.steps, s.mode, s.flavour, s.compaction) == (1, 2, 1, "scripted", "gym-0.7.0-transport",
                                                                                 "identity")
    assert s.script.num_turns == 4 and s.rewards.pattern == (1.0, 0.0)
    assert s.to_data() == {"name": "s", "purpose": "a purpose"}
    assert s.summary() == {"name": "s", "tags": [], "purpose": "a purpose", "expected": "success", "steps": 1,
                           "mode": "scripted"}


def test_to_data_round_trips_and_with_seed_changes_only_the_seed():
    s = _s(compaction="recency-images-k2", rollouts=[{"index": 1, "compaction": "identity"}],
           rewards={"by_index": {0: 1.0}}, mutation={"name": "ghost_media", "index": 1},
           expect={"verdict": "error", "code": "unknown_media_asset", "turn": 4})
    assert Scenario.model_validate(s.to_data()) == s
    t = s.with_seed(7)
    assert t.seed == 7 and {**t.to_data(), "seed": 0} == {**s.to_data(), "seed": 0}


def test_overrides_apply_per_rollout_index_and_group():
    s = _s(groups=2, group_size=3, compaction="recency-images-k1", max_steps=5,
           rollouts=[{"index": 0, "compaction": "identity"}, {"index": 2, "group": 1, "flavour": "gym-pr2870",
                                                              "max_steps": 2}])
    assert [s.setting("compaction", g, i, step=0) for g in range(2) for i in range(3)] == [
        "identity", "recency-images-k1", "recency-images-k1", "identity", "recency-images-k1", "recency-images-k1"]
    assert s.setting("flavour", 1, 2, step=0) == "gym-pr2870" and s.setting("flavour", 0, 2, step=0) == "gym-0.7.0-transport"
    assert (s.setting("max_steps", 1, 2, step=0), s.setting("max_steps", 0, 2, step=0)) == (2, 5)


def test_an_override_sets_or_clears_mask_sample_for_its_rollouts_only():
    """The scenario's `mask_sample` masks an index in every group; an override masks one group's rollout, or
    unmasks it, at its steps only."""
    s = _s(groups=2, group_size=3, steps=2, mask_sample=[2],
           rollouts=[{"index": 1, "group": 1, "mask_sample": True}, {"index": 2, "group": 0, "steps": [1], "mask_sample": False}])
    assert [[s.masks_sample(g, i, step=k) for g in range(2) for i in range(3)] for k in range(2)] == [
        [False, False, True, False, True, True],
        [False, False, False, False, True, True]]
    assert Scenario.model_validate(s.to_data()) == s
    assert "mask_sample" in _error(rollouts=[{"index": 0, "mask_sample": 1}])  # a flag, not a number


def test_an_override_with_steps_applies_at_those_steps_only():
    """Text-only rollouts at steps 0 and 1, screenshots at step 2: the image parameters get no gradient for two
    steps, then one."""
    text = {"generate": {"turns": 2, "images_per_observation": 0}}
    s = _s(steps=3, group_size=2, rollouts=[{"index": i, "steps": [0, 1], "script": text} for i in range(2)])
    assert [s.setting("script", 0, 1, step=k).generate.images_per_observation for k in range(3)] == [0, 0, 1]
    assert Scenario.model_validate(s.to_data()) == s
    for steps, problem in (([3], "rollouts[0].steps names steps [3] outside steps=3"),
                           ([1, 1], "rollouts[0].steps [1, 1] must list each step once"),
                           ([], "rollouts[0].steps [] must list each step once")):
        with pytest.raises(ValueError, match=re.escape(problem)):
            _s(steps=3, rollouts=[{"index": 0, "steps": steps, "script": text}])


def test_trainer_values_merge_overrides_over_one_step_per_logical_batch_defaults():
    s = _s(groups=2, group_size=3, trainer={"grpo": {"normalize_rewards": False}, "policy": {"dp_size": 2}})
    v = s.trainer_values()
    assert v["grpo"] == {"num_prompts_per_step": 2, "num_generations_per_prompt": 3, "max_num_steps": 1, "seed": 0,
                         "normalize_rewards": False}
    assert v["policy"]["train_global_batch_size"] == 6 and v["policy"]["dp_size"] == 2
    cfg = s.trainer_config()
    assert (cfg.policy.precision, cfg.policy.logprob_dtype, cfg.policy.router_replay_enabled) == ("float64", "float64", True)
    assert deep_merge({"a": {"b": 1, "c": 2}}, {"a": {"b": 3}, "d": 4}) == {"a": {"b": 3, "c": 2}, "d": 4}


def test_trainer_values_hold_what_the_config_validated_them_into_not_the_files_strings():
    """The oracle reads `trainer_values` as plain data: a "0.001" pydantic accepted for a float must reach it as 0.001
    (it raised a TypeError mid-run, a harness error instead of a result)."""
    s = _s(trainer={"policy": {"learning_rate": "0.001", "lr_warmup_steps": "2"},
                    "grpo": {"use_leave_one_out_baseline": "yes"}})
    assert s.trainer == {"policy": {"learning_rate": 0.001, "lr_warmup_steps": 2},
                         "grpo": {"use_leave_one_out_baseline": True}}
    assert s.trainer_values()["policy"]["learning_rate"] == 0.001 == s.trainer_config().policy.learning_rate
    with pytest.raises(ValidationError, match="learning_rate"):
        _s(trainer={"policy": {"learning_rate": "fast"}})


def test_training_recipe_maps_a_uniform_scenario_and_refuses_the_rest():
    s = _s(mode="policy", groups=2, steps=20, compaction="recency-images-k2",
           script={"generate": {"turns": 4, "images_per_observation": 1}})
    assert s.training_recipe() == {
        "description": "a purpose", "compaction": "recency-images-k2", "turns": 4, "images_per_observation": 1,
        "flavour": "gym-0.7.0-transport", "num_prompts_per_step": 2, "num_generations_per_prompt": 2,
        "reward_pattern": [1.0, 0.0], "steps": 20, "trainer": {},
    }
    with pytest.raises(ConfigError) as info:
        _s(rollouts=[{"index": 0, "compaction": "identity"}], rewards={"fixed": 1}).training_recipe()
    assert info.value.code == "invalid_argument"
    assert "per-rollout overrides, fixed rewards" in str(info.value)
    with pytest.raises(ConfigError, match="a router shape other than the default"):
        _s(moe={"layers": 3, "top_k": 1}).training_recipe()


@pytest.mark.parametrize(("data", "dropped"), [
    ({"routes": False}, "routes: False"),
    ({"routes_format": "nrlre1"}, "routes_format: 'nrlre1'"),
    ({"mask_sample": [1]}, "mask_sample: (1,)"),
    ({"drift": "merge"}, "drift: 'merge'"),
    ({"endpoint": "responses"}, "endpoint: 'responses'"),
    ({"max_steps": 3}, "max_steps: 3"),
    ({"script": {"generate": {"image_pattern": "repeated"}}}, "script.generate.image_pattern: 'repeated'"),
    ({"script": {"generate": {"final_finish_reason": "length"}}}, "script.generate.final_finish_reason: 'length'"),
    ({"script": {"task": "Another task.", "generate": {}}}, "script.task: 'Another task.'"),
    ({"rewards": {"pattern": [1, 0], "default": 0.5}}, "only a pattern carries"),
])
def test_training_recipe_refuses_a_field_it_would_drop(data: dict, dropped: str):
    """`train` writes its own scripts: `routes: false` or an nrlre1 envelope trained on plain route lists, exit 0,
    while `config.json` still described the scenario (fuzzing round 4)."""
    with pytest.raises(ConfigError) as info:
        _s(**data).training_recipe()
    assert info.value.code == "invalid_argument"
    assert "is not a plain training recipe" in str(info.value) and dropped in str(info.value), str(info.value)


def test_training_recipe_keeps_what_describes_the_scenario_without_changing_the_run():
    s = _s(tags=["t"], seed=9, mode="policy", expect={"verdict": "error", "code": "sequence_too_long"},
           script={"generate": {"turns": 3, "images_per_observation": 2}})
    assert (s.training_recipe()["turns"], s.training_recipe()["images_per_observation"]) == (3, 2)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"name": "Bad Name"}, "use lowercase letters, digits and dashes"),
        ({"purpose": "two\nlines"}, "purpose must be one line"),
        ({"purpose": ""}, "at least 1 character"),
        ({"tags": ["ok", "ok"]}, "repeat a tag"),
        ({"tags": ["Bad"]}, "tags ['Bad']"),
        ({"colour": "blue"}, "Extra inputs are not permitted"),
        ({"compaction": "bogus"}, "unknown policy 'bogus'"),
        ({"rollouts": [{"index": 2}]}, "rollouts[0].index=2 is outside the group (group_size=2)"),
        ({"rollouts": [{"index": 0, "group": 1}]}, "rollouts[0].group=1 is outside groups=1"),
        ({"rollouts": [{"index": 0, "compaction": "nope"}]}, "unknown policy 'nope'"),
        ({"mask_sample": [0, 5]}, "mask_sample [5] names rollout indices outside the group"),
        ({"mask_sample": [0, 1, 0]}, "mask_sample [0, 1, 0] repeats [0]: it lists indices, each once"),
        ({"groups": 2, "fresh_groups": [1, 1]}, "fresh_groups [1, 1] repeats [1]"),
        ({"mutation": {"name": "teleport"}}, "unknown mutation 'teleport'"),
        ({"mutation": {"name": "ghost_media", "step": 1}}, "mutation.step=1 is outside steps=1"),
        ({"corruption": {"kind": "drop_rollout", "index": 4}}, "corruption.index=4 is outside group_size=2"),
        ({"corruption": {"kind": "melt"}}, "Input should be 'duplicate_rollout'"),
        ({"faults": [{"kind": "http_500", "group": 3}]}, "faults[0].group=3 is outside groups=1"),
        ({"faults": [{"kind": "http_500", "step": 2}]}, "faults[0].step=2 is outside steps=1"),
        ({"faults": [{"kind": "http_500", "index": 2}]}, "faults[0].index=2 is outside group_size=2"),
        ({"faults": [{"kind": "meteor"}]}, "Input should be 'http_500'"),
        ({"seed": True}, "seed\n  Input should be a valid integer"),
        ({"seed": "1"}, "seed\n  Input should be a valid integer"),
        ({"steps": True}, "steps\n  Input should be a valid integer"),
        ({"group_size": 2.0}, "group_size\n  Input should be a valid integer"),
        ({"mask_sample": ["0"]}, "mask_sample.0\n  Input should be a valid integer"),
        ({"faults": [{"kind": "http_503", "attempts": [0]}]}, "faults.0.attempts.0\n  Input should be greater than or equal to 1"),
        ({"script": {"turns": [{"text": "b", "logprobs": [-1e308, -1.0]}]}}, "logprobs must be finite and >= -3.4028"),
        ({"trainer": {"policy": {"max_total_sequence_length": 10**20}}}, "Input should be less than 2147483648"),
        ({"expect": {"verdict": "error"}}, "verdict 'error' needs a contract error code"),
        ({"expect": {"verdict": "error", "code": "oops"}}, "unknown contract error code 'oops'"),
        ({"expect": {"code": "turn_order"}}, "verdict 'success' takes no code or turn"),
        ({"flavour": "none", "mutation": {"name": "ghost_media"}}, "its target rollout has flavour 'none'"),
        ({"mutation": {"name": "ghost_media"}, "corruption": {"kind": "drop_rollout"}}, "target the same rollout"),
        ({"rollouts": [{"index": 1, "flavour": "gym-pr2870"}], "mutation": {"name": "unknown_schema_version", "index": 1}},
         "needs a 0.7.0 contract"),
        ({"rewards": {"fixed": 1, "pattern": [1]}}, "exactly one reward rule"),
        ({"rewards": {}}, "got none"),
        ({"rewards": {"predicate": {"reward_true": 1}}}, "exactly one of 'contains' or 'equals'"),
        ({"script": {"turns": [{"text": "a"}, {"text": "b"}]}}, "turns[0] has no tool call"),
        ({"script": {"generate": {"turns": 2}, "turns": [{"text": "a"}]}}, "give exactly one of 'generate'"),
        ({"script": {"generate": {"turns": 3, "image_pattern": "reordered"}}}, "images_per_observation >= 2"),
        ({"script": {"generate": {"turns": 40}}}, "less than or equal to 16"),
        ({"mode": "policy", "script": {"turns": [{"text": "a", "logprobs": [-1, -1]}]}}, "scripted 'logprobs' are not allowed"),
        ({"trainer": {"policy": {"sequence_packing_enabled": True}}}, "policy.sequence_packing_enabled=True is unsupported"),
        ({"trainer": {"policy": {"train_global_batch_size": 3}}}, "must equal grpo.num_prompts_per_step"),
        ({"trainer": {"grpo": {"warp": 1}}}, "grpo.warp"),
        ({"metrics": {"median(loss)": {"equals": 1}}}, "unknown function 'median'"),
        ({"metrics": {"loss": {"below": 1}}}, "unknown check(s) ['below']"),
        ({"groups": 0}, "greater than or equal to 1"),
        ({"steps": 101}, "less than or equal to 100"),
        ({"groups": 2, "tasks": [0]}, "tasks [0] has 1 task number(s); give one per group (groups=2)"),
        ({"groups": 2, "tasks": [0, 0, 1]}, "tasks [0, 0, 1] has 3 task number(s); give one per group (groups=2)"),
        ({"groups": 2, "tasks": [0, -1]}, "tasks.1\n  Input should be greater than or equal to 0"),
        ({"groups": 2, "tasks": [0, 8]}, "tasks.1\n  Input should be less than 8"),
        ({"groups": 2, "tasks": [0, "a"]}, "tasks.1\n  Input should be a valid integer"),
        ({"groups": 2, "fresh_groups": [1]}, "fresh_groups needs async GRPO"),
        ({"moe": {"experts": 2, "top_k": 3}}, "top_k=3 exceeds experts=2"),
        ({"group_size": 1, "corruption": {"kind": "narrow_routes"}}, "narrow_routes needs a second rollout in the batch"),
        # edits that cannot apply to the results are refused at load, not as a harness error after collecting them
        ({"routes": False, "corruption": {"kind": "narrow_routes"}}, "this scenario records none (routes: false)"),
        ({"routes_format": "nrlre1", "corruption": {"kind": "narrow_routes"}}, "routes_format: nrlre1 sends one encoded"),
        ({"moe": {"top_k": 1}, "corruption": {"kind": "narrow_routes"}}, "moe.top_k=1 leaves none"),
        ({"routes": False, "mutation": {"name": "negative_route_id"}}, "records none (routes: false)"),
        ({"routes_format": "nrlre1", "mutation": {"name": "negative_route_id"}}, "as an envelope already"),
        ({"trainer": {"grpo": {"seed": True}}}, "a boolean where a number is expected"),
        ({"moe": {"layers": 0}}, "moe.layers\n  Input should be greater than or equal to 1"),
        ({"moe": {"experts": 9}}, "moe.experts\n  Input should be less than or equal to 8"),
        ({"moe": {"layers": 2.0}}, "moe.layers\n  Input should be a valid integer"),
        ({"moe": {"heads": 2}}, "moe.heads\n  Extra inputs are not permitted"),
        ({"groups": 2, "fresh_groups": [2], "trainer": {"grpo": {"async_grpo": {"enabled": True}},
                                                         "loss_fn": {"use_importance_sampling_correction": True}}},
         "fresh_groups [2] names groups outside groups=2"),
    ],
)
def test_invalid_scenarios_are_rejected_naming_the_field(data, message):
    assert message in _error(**data)


def test_tasks_map_groups_to_task_numbers_and_default_to_one_task_per_group():
    s = _s(groups=3, tasks=[1, 0, 1])
    assert [s.task_of(g) for g in range(3)] == [1, 0, 1]
    assert [_s(groups=3).task_of(g) for g in range(3)] == [0, 1, 2]
    assert Scenario.model_validate(s.to_data()) == s and s.to_data()["tasks"] == [1, 0, 1]
    with pytest.raises(ConfigError, match="explicit tasks"):
        s.training_recipe()


def test_rewards_rule_json_is_the_reward_servers_rule():
    assert RewardsSpec(fixed=0.5).rule_json() == {"kind": "fixed", "value": 0.5}
    assert RewardsSpec(pattern=(1, 0)).rule_json() == {"kind": "pattern", "pattern": [1.0, 0.0]}
    assert RewardsSpec(by_index={1: 0.5}, default=0.25).rule_json() == {"kind": "by_index", "rewards": {"1": 0.5},
                                                                         "default": 0.25}
    assert RewardsSpec(predicate={"equals": "x"}).rule_json() == {"kind": "predicate", "reward_true": 1.0,
                                                                  "reward_false": 0.0, "equals": "x"}


def test_script_spec_builds_generated_or_explicit_turns():
    generated = ScriptSpec(generate=TurnsGenerator(turns=3, images_per_observation=0)).build(5)
    assert len(generated.turns) == 3 and generated.turns[-1].text == "Settings is open."
    explicit = ScriptSpec(task="Hi", turns=({"text": "done"},)).build(5)  # type: ignore[arg-type]
    assert explicit.task == "Hi" and explicit.turns[0].text == "done"


def test_compaction_may_be_an_explicit_context_history_config():
    from compactsim.scenarios.build import step_specs

    s = _s(compaction={"policy": {"type": "recency", "config": {"images": {"enabled": True, "keep_last_groups": 2}}},
                       "schedule": {"type": "turn_chunked_recency", "actions_per_chunk": 2}})
    assert Scenario.model_validate(s.to_data()) == s
    history = step_specs(s, 0)[0].context_history
    assert (history.policy.config.images.keep_last_groups, history.schedule.actions_per_chunk) == (2, 2)
    with pytest.raises(ValidationError, match="rolling_recency requires actions_per_chunk=1"):
        _s(compaction={"schedule": {"type": "rolling_recency", "actions_per_chunk": 3}})


@pytest.mark.parametrize(("data", "says"), [
    ({"purpose": "   "}, "purpose must say something"),  # passed min_length, then failed the run's re-validation
    ({"trainer": {"policy": {"pad_token_id": 2147483646}}}, "policy.pad_token_id=2147483646 is not a token"),
])
def test_a_scenario_that_could_not_run_is_refused_when_it_loads(data, says):
    with pytest.raises(ValidationError, match=says):
        _s(**data)
