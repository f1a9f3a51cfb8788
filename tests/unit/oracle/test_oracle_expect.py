"""Scenario-level expectations: batch errors, rewards from the rule, exact metrics, steps and log checks."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from compactsim.harness.core import metrics as M
from compactsim.harness.core.errors import ConfigError
from compactsim.harness.oracle import TrainerView, batch_error, expect_scenario, expect_step, expected_reward, read_truth
from compactsim.scenarios.execute import collect_step
from compactsim.scenarios.model import Scenario
from tests.unit.oracle.oracle_builders import call, rollout

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")

VIEW = TrainerView(num_generations_per_prompt=2, leave_one_out=True, normalize=True, clip_low=None, clip_high=None,
                   dp_size=1, micro_batch_size=1, async_mode=False, importance_sampling_correction=False)


def _scenario(**data) -> Scenario:
    return Scenario.model_validate({"name": "unit", "purpose": "oracle unit test", **data})


def _pair(*, versions=(0, 0), sampled=([2], [3]), topk=(None, None)):
    out = []
    for i in range(2):
        c = call(1, [1], sampled[i], version=versions[i])
        out.append(rollout([c], rid=f"s0-g0-r{i}", index=i))
    return out


def test_batch_checks_run_in_order_duplicates_groups_versions_then_tokens():
    a, b = _pair()
    assert batch_error([a, b], VIEW) is None
    assert batch_error([a, b, b], VIEW).to_json() == {"code": "duplicate_logical_rollout_id", "rollout_id": "s0-g0-r1",
                                                       "turn_id": None}
    assert batch_error([b], VIEW).to_json() == {"code": "incomplete_group", "rollout_id": "s0-g0-r1", "turn_id": None}
    extra = rollout([call(1, [1], [2])], rid="s0-g0-r2", index=2)
    assert batch_error([a, b, extra], VIEW).code == "oversized_group"
    a2, b2 = _pair(versions=(0, 1))
    assert batch_error([a2, b2], VIEW).to_json() == {"code": "mixed_policy_versions", "rollout_id": None, "turn_id": None}
    a3, b3 = _pair(sampled=([2], []))
    assert batch_error([a3, b3], VIEW).to_json() == {"code": "no_eligible_tokens", "rollout_id": "s0-g0-r1", "turn_id": None}
    assert batch_error([], VIEW).code == "no_eligible_tokens"


def test_mixed_versions_inside_one_rollout_name_that_rollout():
    c1, c2 = call(1, [1], [2], version=0), call(2, [1, 2], [3], version=1)
    a = rollout([c1, c2])
    b = rollout([call(1, [1], [2])], rid="s0-g0-r1", index=1)
    assert batch_error([a, b], VIEW).to_json()["rollout_id"] == "s0-g0-r0"


def test_async_batches_may_mix_versions_across_groups_only_with_importance_sampling_correction():
    g0 = [rollout([call(1, [1], [2], version=0)], rid=f"a{i}", index=i, group="g0") for i in range(2)]
    g1 = [rollout([call(1, [1], [2], version=1)], rid=f"b{i}", index=i, group="g1") for i in range(2)]
    assert batch_error(g0 + g1, VIEW).code == "mixed_policy_versions"
    assert batch_error(g0 + g1, replace(VIEW, async_mode=True)).code == "mixed_policy_versions"
    assert batch_error(g0 + g1, replace(VIEW, async_mode=True, importance_sampling_correction=True)) is None


def test_route_layouts_must_agree_across_the_batch():
    import numpy as np

    from tests.unit.oracle.oracle_builders import packed_routes

    a = rollout([call(1, [1], [2], routes=packed_routes(2, 1))])
    b = rollout([call(1, [1], [2], routes=packed_routes(2, 1, topk=3))], rid="s0-g0-r1", index=1)
    assert batch_error([a, b], VIEW).to_json() == {"code": "inconsistent_routed_expert_shapes", "rollout_id": "s0-g0-r1",
                                                   "turn_id": None}
    assert np.array_equal(a.calls[0].routes[-1], [[0, 1]])


def test_router_replay_refuses_no_routes_in_the_batch_then_the_first_route_less_call():
    from tests.unit.oracle.oracle_builders import packed_routes

    replay = replace(VIEW, router_replay=True)
    routed = rollout([call(1, [1], [2], routes=packed_routes(2, 1)), call(2, [1, 2, 5], [3], routes=packed_routes(4, 1))])
    gap = rollout([call(1, [1], [2], routes=packed_routes(2, 1)), call(2, [1, 2, 5], [3]), call(3, [1, 2, 5, 3, 6], [4])],
                  rid="s0-g0-r1", index=1)
    bare = [rollout([call(1, [1], [2])], rid=f"s0-g0-r{i}", index=i) for i in range(2)]
    assert batch_error(bare, replay).to_json() == {"code": "missing_routed_experts", "rollout_id": None, "turn_id": None}
    assert batch_error([routed, gap], replay).to_json() == {"code": "missing_routed_experts", "rollout_id": "s0-g0-r1",
                                                            "turn_id": 2}
    assert batch_error([routed, gap], VIEW) is None  # replay off: the call's positions replay -1


@pytest.mark.parametrize(
    ("rewards", "index", "answer", "value"),
    [
        ({"fixed": 0.25}, 3, "", 0.25),
        ({"pattern": [1, 0, 0.5]}, 5, "", 0.5),
        ({"by_index": {1: 0.75}, "default": -1.0}, 1, "", 0.75),
        ({"by_index": {1: 0.75}, "default": -1.0}, 2, "", -1.0),
        ({"predicate": {"contains": "open"}}, 0, "Settings is open.", 1.0),
        ({"predicate": {"equals": "open", "reward_false": -0.5}}, 0, "Settings is open.", -0.5),
    ],
)
def test_expected_reward_comes_from_the_scenario_rule(rewards, index, answer, value):
    truth = replace(rollout([call(1, [1], [2])], index=index), final_answer=answer)
    assert expected_reward(_scenario(rewards=rewards, group_size=8), truth) == value


def test_trainer_view_reads_defaults_and_overrides_as_plain_values():
    view = TrainerView.of(_scenario(group_size=3, trainer={"grpo": {"use_leave_one_out_baseline": False},
                                                           "policy": {"dp_size": 2, "train_micro_batch_size": 2}}))
    assert (view.num_generations_per_prompt, view.leave_one_out, view.normalize, view.dp_size, view.micro_batch_size) == (
        3, False, True, 2, 2)


def test_expect_step_computes_rows_metrics_and_per_step_checks():
    scenario = _scenario(compaction="recency-images-k2", script={"generate": {"turns": 4}}, routes=False,
                         trainer={"policy": {"dp_size": 4}}, metrics={"grad_norm": {"min": 0}, "mean(loss)": {"max": 1}})
    step = expect_step(scenario, 0, [c.ground_truth for c in collect_step(scenario)])
    assert step.error is None and step.batch_error is None
    assert [len(r.traces) for r in step.rollouts] == [2, 2]
    assert [r.advantage for r in step.rollouts] == [1.0, -1.0]
    m = step.exact_metrics
    assert (m[M.NUM_PHYSICAL_ROWS], m[M.NUM_PADDING_ROWS], m[M.NUM_SPLIT_ROLLOUTS], m[M.ROWS_PER_ROLLOUT_MAX]) == (4, 0, 2, 2)
    assert m[M.TOTAL_NUM_TOKENS] == sum(len(r.input_ids) for r in step.rows)
    assert [e.expression for e in step.metric_expectations] == ["grad_norm"]


def test_expect_scenario_stops_at_the_first_failing_step_and_keeps_run_level_checks_on_success():
    scenario = _scenario(steps=2, metrics={"sum(physical_trace_training/optimizer_steps)": {"equals": 2}},
                         script={"generate": {"turns": 2}})
    logs = [[c.ground_truth for c in collect_step(scenario, k)] for k in range(2)]
    ok = expect_scenario(scenario, logs)
    assert (ok.verdict, len(ok.steps), ok.error) == ("success", 2, None)
    assert [e.expression for e in ok.metric_expectations] == ["sum(physical_trace_training/optimizer_steps)"]
    partial = expect_scenario(scenario, logs[:1])
    assert len(partial.steps) == 1
    bad = scenario.model_validate({**scenario.to_data(), "corruption": {"kind": "drop_rollout", "step": 0, "index": 1}})
    failed = expect_scenario(bad, logs)
    assert (failed.verdict, len(failed.steps), failed.error.code) == ("error", 1, "incomplete_group")
    assert failed.metric_expectations == ()
    with pytest.raises(ConfigError, match="3 steps of logs"):
        expect_scenario(scenario, logs + logs[:1])


def test_logs_of_another_step_are_refused():
    scenario = _scenario(steps=2, script={"generate": {"turns": 1}})
    logs = [c.ground_truth for c in collect_step(scenario, 1)]
    with pytest.raises(ConfigError, match="step 0 of 'unit' has rollouts"):
        expect_step(scenario, 0, logs)


def test_a_mutation_aimed_at_a_rollout_that_failed_is_a_config_error():
    scenario = _scenario(compaction="recency-images-k1", faults=[{"kind": "missing_logprobs", "index": 1, "turn": 1}],
                         mutation={"name": "ghost_media", "index": 1})
    with pytest.raises(ConfigError, match="mutation target 's0-g0-r1' did not complete"):
        expect_step(scenario, 0, [c.ground_truth for c in collect_step(scenario)])


def test_an_empty_batch_names_the_collection_failures_that_emptied_it():
    """think-strip keep 0: Gym's descriptor rule calls call 2 append-compatible, the server refuses its prefix."""
    scenario = _scenario(compaction="think-strip-keep0", script={"generate": {"turns": 3}})
    step = expect_step(scenario, 0, [c.ground_truth for c in collect_step(scenario)])
    assert step.batch_error.to_json() == {"code": "no_eligible_tokens", "rollout_id": None, "turn_id": None}
    assert step.batch_error.cause.startswith(
        "2 of the 2 rollouts of step 0 failed during collection; the first, s0-g0-r0, at turn 2: evidence_violation: "
        "HTTP 400: ")
    assert "required_prefix_token_ids is not a prefix of the rendered prompt" in step.batch_error.cause
    # a batch emptied by a corruption, not by failures, has no cause to name
    dropped = _scenario(script={"generate": {"turns": 1}}, group_size=1,
                        corruption={"kind": "drop_rollout", "index": 0})
    step = expect_step(dropped, 0, [c.ground_truth for c in collect_step(dropped)])
    assert (step.batch_error.code, step.batch_error.cause) == ("no_eligible_tokens", None)


def test_read_truth_rejects_what_is_not_a_version_1_ground_truth_log():
    scenario = _scenario(script={"generate": {"turns": 1}})
    log = collect_step(scenario)[0].ground_truth
    truth = read_truth(log)
    assert (truth.rollout_id, truth.group_key, truth.rollout_index, truth.completed) == ("s0-g0-r0", "s0-g0", 0, True)
    assert truth.final_answer == "Settings is open."
    for bad, message in (({**log, "format": "x"}, "not a ground-truth log"), ({**log, "version": 2}, "version 2")):
        with pytest.raises(ConfigError, match=message):
            read_truth(bad)
    broken = copy.deepcopy(log)
    broken["calls"][0]["received"]["prompt_token_ids"] = ["a"]
    with pytest.raises(ConfigError, match=r"calls\[0\].received.prompt_token_ids: expected a list of integers"):
        read_truth(broken)


def test_the_whole_expectation_serialises_to_plain_json():
    import json

    scenario = _scenario(compaction="recency-images-k2", script={"generate": {"turns": 4}},
                         metrics={"max(loss)": {"max": 3}})
    exp = expect_scenario(scenario, [[c.ground_truth for c in collect_step(scenario)]])
    data = json.loads(json.dumps(exp.to_json()))
    assert (data["scenario"], data["verdict"], data["error"]) == ("unit", "success", None)
    assert data["metric_expectations"] == [{"metric": "loss", "kind": "max", "value": 3.0, "aggregate": "max"}]
    (step,) = data["steps"]
    assert [r["physical_trace_id"] for r in step["rows"]] == ["s0-g0-r0/trace-0", "s0-g0-r0/trace-1",
                                                              "s0-g0-r1/trace-0", "s0-g0-r1/trace-1"]
    assert step["rollouts"][0]["physical_traces"][1]["start_reason"] == "declared_boundary"
    assert step["exact_metrics"]["physical_trace_training/num_split_rollouts"] == 2
