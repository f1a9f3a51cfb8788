"""Building a scenario: rollout specs, server settings, and the step batch the trainer receives."""

from __future__ import annotations

import pytest

from compactsim.harness.core.errors import ConfigError
from compactsim.harness.core.seeds import derive_int
from compactsim.scenarios.build import (
    EditNotApplicable,
    build_scenario,
    bump_policy_version,
    fault_specs,
    model_server_settings,
    narrow_routes,
    resubmitted,
    reward_server_settings,
    rollout_seed,
    slot_of,
    slots,
    step_results,
    step_specs,
    without_reward,
    zero_call_capture,
)
from compactsim.scenarios.execute import collect_step
from compactsim.scenarios.model import Scenario
from compactsim.scenarios.mutations import MUTATIONS_BY_NAME, MutationNotApplicable

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")


def _s(**data) -> Scenario:
    return Scenario.model_validate({"name": "b", "purpose": "build test", **data})


def test_rollouts_are_addressed_by_step_group_and_index():
    s = _s(groups=2, group_size=2, steps=2)
    assert [x.rollout_id for x in slots(s, 1)] == ["s1-g0-r0", "s1-g0-r1", "s1-g1-r0", "s1-g1-r1"]
    specs = step_specs(s, 1)
    assert [(sp.group_id, sp.task_id, sp.rollout_index) for sp in specs] == [
        ("s1-g0", "task-0", 0), ("s1-g0", "task-0", 1), ("s1-g1", "task-1", 0), ("s1-g1", "task-1", 1)]
    assert specs[2].script.task == "Open the settings app. [task 1]"
    assert specs[0].seed == derive_int(0, "scenario.rollout", step=1, group=0, index=0) == rollout_seed(s, slots(s, 1)[0])
    assert slot_of(s, "s1-g1-r0").group == 1
    with pytest.raises(ConfigError, match="step=2 is outside scenario 'b'"):
        slots(s, 2)
    with pytest.raises(ConfigError, match="'s9-g0-r0' is not part of scenario 'b'"):
        slot_of(s, "s9-g0-r0")


def test_groups_sharing_a_task_share_task_id_and_first_prompt_but_keep_their_group_and_rollout_keys():
    s = _s(groups=3, group_size=2, tasks=[1, 0, 1], script={"generate": {"turns": 2}})
    specs = step_specs(s, 0)
    assert [(sp.group_id, sp.task_id) for sp in specs] == [
        ("s0-g0", "task-1"), ("s0-g0", "task-1"), ("s0-g1", "task-0"), ("s0-g1", "task-0"), ("s0-g2", "task-1"),
        ("s0-g2", "task-1")]
    assert specs[0].script == specs[4].script != specs[2].script  # one task, one script
    assert (specs[0].script.task, specs[2].script.task) == ("Open the settings app. [task 1]", "Open the settings app. [task 0]")
    assert sorted(model_server_settings(s)["script"]) == [sp.rollout_id for sp in specs]
    col = collect_step(s)
    contracts = [c.result["response"]["context_compaction_contract"] for c in col]
    assert [(k["rollout_id"], k["group_id"], k["task_id"]) for k in contracts] == [
        (sp.rollout_id, sp.group_id, sp.task_id) for sp in specs]
    first = [c.ground_truth["calls"][0]["received"]["prompt_token_ids"] for c in col]
    assert first[0] == first[1] == first[4] == first[5] != first[2]
    # the server keys calls by rollout id, not by prompt: same prompt, own logprobs, reproducibly
    logprobs = [tuple(c.ground_truth["calls"][0]["received"]["generation_log_probs"]) for c in col]
    assert len(set(logprobs)) == 6
    assert [c.artifact_digest() for c in collect_step(s)] == [c.artifact_digest() for c in col]


def test_a_tasks_images_are_one_set_of_pixels_for_every_rollout_that_asks_it_and_observations_stay_each_rollouts_own():
    image = {"key": "task-reference", "width": 16, "height": 12}
    s = _s(groups=3, group_size=2, tasks=[1, 0, 1], steps=2,
           script={"generate": {"turns": 2}, "task_images": [image]})
    specs = [*step_specs(s, 0), *step_specs(s, 1)]
    assert len({sp.seed for sp in specs}) == 12  # each rollout still draws its own observations
    seeds = [sp.task_image_seed for sp in specs]
    assert seeds[0] == seeds[1] == seeds[4] == seeds[5] == seeds[6] != seeds[2] == seeds[3]  # by task, at every step
    col = collect_step(s)
    first_images = [c.ground_truth["calls"][0]["sent"]["media_ids"] for c in col]  # the task image only
    assert len(first_images[0]) == 1 and first_images[0] == first_images[1] == first_images[4] != first_images[2]
    later = [c.ground_truth["calls"][1]["sent"]["media_ids"][1:] for c in col]  # + the first observation's screenshot
    assert len(later[0]) == 1 and len({m for ids in later for m in ids}) == 6
    # without a task seed (a spec built by hand), the task's pixels are the rollout's own, as before
    assert specs[0].model_copy(update={"task_seed": None}).task_image_seed == specs[0].seed


def test_the_mock_server_keys_rollouts_of_a_shared_task_apart():
    from compactsim.agents.collect import InProcessServers
    from compactsim.agents.rollout.loop import RetryPolicy, ScriptedAgent

    s = _s(groups=2, group_size=1, tasks=[0, 0], script={"generate": {"turns": 2}})
    specs = step_specs(s, 0)
    with InProcessServers(model_server_settings(s), reward_server_settings(s)).open() as (model, _):
        records = [ScriptedAgent(model, retry=RetryPolicy()).run(sp) for sp in specs]
        log = model.get("/request_log").json()["entries"]
    assert [(e["rollout_id"], e["turn"]) for e in log] == [("s0-g0-r0", 1), ("s0-g0-r0", 2), ("s0-g1-r0", 1), ("s0-g1-r0", 2)]
    a, b = ([c.observed.prompt_token_ids for c in r.calls] for r in records)
    assert a[0] == b[0]


def test_specs_carry_overrides_flavour_endpoint_and_sampling():
    s = _s(group_size=3, compaction="recency-images-k1", endpoint="chat", max_output_tokens=64,
           rollouts=[{"index": 1, "compaction": "identity", "flavour": "gym-pr2870", "send_required_prefix": False,
                      "script": {"generate": {"turns": 2}}}])
    a, b, c = step_specs(s, 0)
    assert a.context_history.policy.type == "recency" and b.context_history.policy.type == "identity"
    assert (b.flavour, b.send_required_prefix, len(b.script.turns)) == ("gym-pr2870", False, 2)
    assert (a.endpoint, a.sampling.max_output_tokens, len(c.script.turns)) == ("chat", 64, 4)


def test_fault_selectors_expand_to_rollout_ids():
    s = _s(groups=2, steps=2, faults=[{"kind": "http_503", "index": 1, "step": 1, "turn": 2, "probability": 0.5},
                                      {"kind": "slow", "delay_s": 0.01}])
    assert fault_specs(s) == [
        {"kind": "http_503", "endpoint": "any", "probability": 0.5, "turn": 2, "rollout_id": "s1-g0-r1"},
        {"kind": "http_503", "endpoint": "any", "probability": 0.5, "turn": 2, "rollout_id": "s1-g1-r1"},
        {"kind": "slow", "endpoint": "any", "probability": 1.0, "delay_s": 0.01},
    ]


def test_server_settings_script_every_step_and_carry_mode_drift_rewards_and_masks():
    s = _s(steps=2, drift="merge", routes=False, mode="policy", rewards={"pattern": [1, 0.5]}, mask_sample=[1],
           trainer={"policy": {"precision": "float32", "logprob_dtype": "float32"}})
    m = model_server_settings(s)
    assert sorted(m["script"]) == ["s0-g0-r0", "s0-g0-r1", "s1-g0-r0", "s1-g0-r1"]
    assert (m["mode"], m["drift"], m["return_routed_experts"], m["policy"]) == ("policy", "merge", False, {"dtype": "float32"})
    assert m["script"]["s0-g0-r0"][-1]["text"] == "Settings is open."
    assert reward_server_settings(s) == {"rule": {"kind": "pattern", "pattern": [1.0, 0.5]}, "mask_sample_indices": [1]}
    build = build_scenario(s)
    assert len(build.specs) == 2 and build.trainer_config.grpo.num_generations_per_prompt == 2
    from compactsim.mock_servers.model_server import ServerSettings
    from compactsim.mock_servers.reward_server import RewardSettings

    ServerSettings.model_validate(m)
    RewardSettings.model_validate(reward_server_settings(s))


def test_the_router_shape_reaches_the_server_settings_and_the_trainers_model_and_the_default_adds_no_key():
    default = _s()
    assert not {"num_layers", "num_experts", "top_k"} & set(model_server_settings(default))  # older settings unchanged
    assert (build_scenario(default).model_config.n_layers, build_scenario(default).model_config.top_k) == (2, 2)
    s = _s(moe={"layers": 3, "experts": 5, "top_k": 1})
    m = model_server_settings(s)
    assert (m["num_layers"], m["num_experts"], m["top_k"]) == (3, 5, 1)
    c = build_scenario(s).model_config
    assert (c.n_layers, c.n_experts, c.top_k) == (3, 5, 1)
    from compactsim.mock_servers.model_server import ServerSettings

    settings = ServerSettings.model_validate(m)
    assert (settings.num_layers, settings.num_experts, settings.top_k) == (3, 5, 1)


def test_a_mask_sample_override_lists_the_masked_rollouts_by_id_for_the_reward_server():
    from compactsim.mock_servers.reward_server import RewardSettings

    s = _s(steps=2, groups=2, group_size=2, mask_sample=[0], rollouts=[{"index": 1, "group": 1, "steps": [1], "mask_sample": True}])
    settings = reward_server_settings(s)
    assert settings == {"rule": {"kind": "pattern", "pattern": [1.0, 0.0]},
                        "mask_sample_rollout_ids": ["s0-g0-r0", "s0-g1-r0", "s1-g0-r0", "s1-g1-r0", "s1-g1-r1"]}
    RewardSettings.model_validate(settings)


def _fake(rid: str, result=None):
    return {"rollout_id": rid, "result": result}


def test_step_results_keep_completed_rollouts_in_slot_order():
    s = _s(group_size=3)
    out = step_results(s, 0, [_fake("s0-g0-r2", {"n": 2}), _fake("s0-g0-r0", {"n": 0}), _fake("s0-g0-r1", None)],
                       generation_version=None)
    assert out == [{"n": 0}, {"n": 2}]
    with pytest.raises(ConfigError, match="not part of step 0"):
        step_results(s, 0, [_fake("s1-g0-r0", {})], generation_version=None)


def test_step_results_label_every_result_with_the_trainers_generation_version():
    s = _s(group_size=2)
    out = step_results(s, 0, [_fake("s0-g0-r0", {"n": 0}), _fake("s0-g0-r1", {"n": 1})], generation_version=3)
    assert out == [{"n": 0, "trainer_policy_version": 3}, {"n": 1, "trainer_policy_version": 3}]


def _token_items(result):
    return [it for it in result["response"]["output"] if it.get("generation_token_ids") is not None]


def _labelled(result, version):
    return {**result, "trainer_policy_version": version}


@pytest.fixture(scope="module")
def collected():
    s = _s(compaction="recency-images-k1", script={"generate": {"turns": 4}})
    return s, collect_step(s)


def test_step_results_apply_the_mutation_to_its_target_only(collected):
    s, col = collected
    mutated = s.model_validate({**s.to_data(), "mutation": {"name": "ghost_media", "index": 1}})
    a, b = step_results(mutated, 0, col, generation_version=0)
    assert a == _labelled(col[0].result, 0)
    assert b["response"]["model_call_metadata"][-1]["media_ids"][-1] == "ghost"
    assert "ghost" not in col[1].result["response"]["model_call_metadata"][-1]["media_ids"]  # input untouched


@pytest.mark.parametrize(
    ("kind", "check"),
    [
        ("duplicate_rollout", lambda out, col: out == [_labelled(col[0].result, 2), _labelled(col[1].result, 2),
                                                        _labelled(col[1].result, 2)]),
        ("drop_rollout", lambda out, col: out == [_labelled(col[0].result, 2)]),
        ("zero_call_capture", lambda out, col: out[1]["response"]["model_call_metadata"] == []
         and all(it.get("generation_token_ids") is None for it in out[1]["response"]["output"])),
        # the label goes up; Gym's items still carry no version
        ("bump_policy_version", lambda out, col: [r["trainer_policy_version"] for r in out] == [2, 3]
         and not any("policy_version" in it for r in out for it in r["response"]["output"])),
        # every call of the target keeps its token and layer counts and loses its last expert column
        ("narrow_routes", lambda out, col: out[0] == _labelled(col[0].result, 2) and [
            [[layer for layer in row] for row in it["routed_experts"]] for it in _token_items(out[1])] == [
            [[layer[:-1] for layer in row] for row in it["routed_experts"]] for it in _token_items(col[1].result)]),
        # the copy follows its original, renamed in the contract and every call record; nothing else differs
        ("resubmit_under_new_id", lambda out, col: out[:2] == [_labelled(col[0].result, 2), _labelled(col[1].result, 2)]
         and out[2]["response"]["context_compaction_contract"]["rollout_id"] == "s0-g0-r1-resubmitted"
         and {r["rollout_id"] for r in out[2]["response"]["model_call_metadata"]} == {"s0-g0-r1-resubmitted"}
         and out[2]["response"]["output"] == out[1]["response"]["output"]),
        ("drop_reward", lambda out, col: "reward" in col[1].result and out == [
            _labelled(col[0].result, 2), {k: v for k, v in _labelled(col[1].result, 2).items() if k != "reward"}]),
    ],
)
def test_step_results_apply_each_batch_corruption(collected, kind, check):
    s, col = collected
    corrupted = s.model_validate({**s.to_data(), "corruption": {"kind": kind, "index": 1}})
    assert check(step_results(corrupted, 0, col, generation_version=2), col)


def test_a_target_that_did_not_complete_or_cannot_be_mutated_is_reported(collected):
    s, col = collected
    failed = [col[0], _fake("s0-g0-r1", None)]
    mutated = s.model_validate({**s.to_data(), "mutation": {"name": "ghost_media", "index": 1}})
    with pytest.raises(ConfigError, match="mutation target 's0-g0-r1' of scenario 'b' did not complete"):
        step_results(mutated, 0, failed, generation_version=0)
    flat = _s(mutation={"name": "spoof_append_declaration", "index": 0})
    with pytest.raises(ConfigError, match="mutation 'spoof_append_declaration' does not apply to 's0-g0-r0' at step 0: "
                                          "payload has no call with a compaction_event_id"):
        step_results(flat, 0, collect_step(flat), generation_version=0)
    one_call = _s(mutation={"name": "swap_turn_ids", "index": 0}, script={"generate": {"turns": 1}})
    with pytest.raises(ConfigError, match="payload has 1 call record"):  # was an IndexError
        step_results(one_call, 0, collect_step(one_call), generation_version=0)
    with pytest.raises(EditNotApplicable, match="payload has no call with a compaction_event_id"):  # exit 2 in `run`
        step_results(flat, 0, collect_step(flat), generation_version=0)
    with pytest.raises(ValueError, match="records none \\(routes: false\\)"):  # this one is known at load
        _s(corruption={"kind": "narrow_routes", "index": 0}, routes=False)


def test_zero_call_capture_and_version_bump_leave_their_input_alone(collected):
    _, col = collected
    result = col[0].result
    empty = zero_call_capture(result)
    assert empty["response"]["media_assets"] == {} and empty["response"]["boundary_events"] == []
    assert result["response"]["model_call_metadata"]
    assert bump_policy_version(result) != result
    with pytest.raises(MutationNotApplicable):
        bump_policy_version(empty)
    with pytest.raises(MutationNotApplicable, match="partial_token_fields: the payload lacks the part it edits"):
        MUTATIONS_BY_NAME["partial_token_fields"].apply(empty)  # no token item: was an IndexError
    with pytest.raises(MutationNotApplicable, match="records no routed experts"):
        narrow_routes(empty)
    one_expert = narrow_routes(result)  # top-k 2 -> 1: one column fewer cannot be taken again
    with pytest.raises(MutationNotApplicable, match="top-k >= 2"):
        narrow_routes(one_expert)
    bare = {"response": {k: v for k, v in result["response"].items() if k != "context_compaction_contract"}}
    with pytest.raises(MutationNotApplicable, match="no contract rollout_id"):
        resubmitted(bare)
    with pytest.raises(MutationNotApplicable, match="no reward to drop"):
        without_reward(bare)
    assert result["response"]["context_compaction_contract"]["rollout_id"] == "s0-g0-r0"


def test_specs_are_a_pure_function_of_the_scenario():
    s = _s(groups=2, compaction="summary")
    assert step_specs(s, 0) == step_specs(s, 0)
    assert [sp.seed for sp in step_specs(s, 0)] != [sp.seed for sp in step_specs(s.with_seed(1), 0)]
