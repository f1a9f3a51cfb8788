"""The trace planner: every rule, every error code, and the valid neighbour of each."""

from __future__ import annotations

import base64
import copy

import numpy as np
import pytest

from compactsim.harness.core.digests import canonical_digest
from compactsim.harness.core.errors import ContractError
from compactsim.harness.pipeline.materializer import materialize
from compactsim.harness.pipeline.planner import DIAGNOSTIC_WINDOW, plan_rollout
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.scenarios.mutations import MUTATIONS, Mutation, MutationNotApplicable
from compactsim.scenarios.payloads import Call, build_response, compacted_three_calls, continuing, run_result

# ---------------------------------------------------------------------------------------------
# the reference payloads


def test_reference_example_splits_into_turns_1_2_and_3(example_transport):
    plan = plan_rollout(example_transport)
    assert plan.path == "physical"
    assert [t.turn_ids for t in plan.traces] == [(1, 2), (3,)]
    assert [t.start_reason for t in plan.traces] == ["rollout_start", "declared_boundary"]
    assert [t.trace_id for t in plan.traces] == ["rollout-demo-0/trace-0", "rollout-demo-0/trace-1"]
    assert [t.num_tokens for t in plan.traces] == [10, 14]
    assert [t.num_sampled_tokens for t in plan.traces] == [4, 3]
    assert plan.trainable and plan.violations == ()


def test_reference_example_carried_image_is_owned_by_both_traces(example_transport):
    plan = plan_rollout(example_transport)
    image = "media-e5214ee50da1954c70348ac5"
    assert [t.media_ids for t in plan.traces] == [(image,), (image,)]


def test_pr2870_shape_plans_like_the_070_shape(example_transport, example_pr2870):
    assert plan_rollout(example_pr2870).to_json() == plan_rollout(example_transport).to_json()
    assert plan_rollout(example_pr2870).evidence.flavour == "gym-pr2870"
    assert plan_rollout(example_transport).evidence.flavour == "gym-0.7.0-transport"


def test_run_result_wrapper_is_accepted_and_reward_read(example_transport):
    plan = plan_rollout({"response": example_transport, "reward": 0.25, "instance_config": {"mask_sample": True}})
    assert [t.turn_ids for t in plan.traces] == [(1, 2), (3,)]
    assert plan.evidence.reward == 0.25
    assert plan.evidence.mask_sample is True
    assert plan.evidence.group_id == "group-demo" and plan.evidence.task_id == "task-demo"


def test_payload_carrying_both_contract_keys_is_accepted(example_transport):
    both = copy.deepcopy(example_transport)
    both["rollout_trace_contract"] = {
        k: v for k, v in both["context_compaction_contract"].items() if k not in ("schema_version", "mode")
    }
    assert [t.turn_ids for t in plan_rollout(both).traces] == [(1, 2), (3,)]


@pytest.mark.parametrize("flavour", ["transport", "full", "pr2870", "osworld"])
def test_every_flavour_plans_the_same_segmentation(flavour):
    plan = plan_rollout(compacted_three_calls(flavour))
    assert [t.turn_ids for t in plan.traces] == [(1, 2), (3,)]
    expected_flavour = {
        "transport": "gym-0.7.0-transport",
        "full": "gym-0.7.0-full",
        "pr2870": "gym-pr2870",
        "osworld": "osworld",
    }[flavour]
    assert plan.evidence.flavour == expected_flavour


# ---------------------------------------------------------------------------------------------
# media ownership


def test_new_trace_reowns_all_media_its_prompt_uses_not_only_new_ones():
    plan = plan_rollout(compacted_three_calls())
    assert [t.media_ids for t in plan.traces] == [("screen-a",), ("screen-a", "screen-b")]


def test_repeated_media_keep_their_order_and_duplicates():
    c1 = Call([1, 2], [3], media=["m1"])
    c2 = continuing(c1, [4], [5], media=["m1", "m1", "m2"])
    plan = plan_rollout(build_response([c1, c2]))
    assert plan.traces[0].media_ids == ("m1", "m1", "m2")


def test_media_continuity_inside_a_trace_is_enforced():
    c1 = Call([1, 2], [3], media=["m1", "m2"])
    c2 = continuing(c1, [4], [5], media=["m2", "m1"])
    with pytest.raises(ContractError) as info:
        plan_rollout(build_response([c1, c2]))
    assert info.value.code == "media_continuity"
    assert info.value.turn_id == 2
    assert "['m2', 'm1'] do not extend the previous call's ['m1', 'm2']" in str(info.value)


def test_media_may_change_freely_across_a_declared_boundary():
    c1 = Call([1, 2], [3], media=["m1", "m2"])
    c2 = Call([9, 9], [5], media=["m2"], boundary=True)
    plan = plan_rollout(build_response([c1, c2]))
    assert [t.media_ids for t in plan.traces] == [("m1", "m2"), ("m2",)]


# ---------------------------------------------------------------------------------------------
# single-trace paths


def test_contract_without_boundary_keeps_the_single_trace_path():
    c1 = Call([1, 2], [3])
    c2 = continuing(c1, [4], [5, 6])
    plan = plan_rollout(build_response([c1, c2]))
    assert plan.path == "single"
    assert [t.turn_ids for t in plan.traces] == [(1, 2)]
    assert plan.traces[0].num_tokens == 6 and plan.traces[0].num_sampled_tokens == 3


def test_legacy_response_without_contract_is_one_trace_when_contiguous():
    c1 = Call([1, 2], [3])
    c2 = continuing(c1, [4], [5])
    plan = plan_rollout(build_response([c1, c2], flavour="none"))
    assert plan.evidence.flavour == "none" and not plan.evidence.has_contract
    assert plan.path == "single"
    assert [t.turn_ids for t in plan.traces] == [(1, 2)]
    assert plan.rollout_id == "resp-rollout-0"


def test_legacy_discontinuity_diagnostic_names_turn_lengths_offset_window_and_causes():
    c1 = Call(list(range(100, 140)), [7, 8])
    prompt = c1.prompt + c1.sampled
    prompt = prompt[:30] + [999] + prompt[31:] + [5]
    c2 = Call(prompt, [9])
    with pytest.raises(ContractError) as info:
        plan_rollout(build_response([c1, c2], flavour="none"))
    err = info.value
    assert err.code == "undeclared_discontinuity"
    assert err.turn_id == 2
    msg = str(err)
    assert "first divergent turn" in msg
    assert "previous context length 42" in msg
    assert "mismatch offset 30" in msg
    context = c1.prompt + c1.sampled
    assert f"previous context[14:46]={context[14:46]}" in msg
    assert f"prompt[14:46]={prompt[14:46]}" in msg
    assert len(context[14:46]) <= 2 * DIAGNOSTIC_WINDOW
    assert "media: not declared (no contract)" in msg
    assert "token merging / retokenization" in msg
    assert "truncated history" in msg
    assert "stripped reasoning" in msg


def test_legacy_response_with_no_token_items_is_missing_token_evidence():
    resp = build_response([Call([1], [2])], flavour="none")
    resp["output"] = [i for i in resp["output"] if "generation_token_ids" not in i]
    with pytest.raises(ContractError) as info:
        plan_rollout(resp)
    assert info.value.code == "missing_token_evidence"
    assert "no output item carries prompt_token_ids" in str(info.value)


def test_contract_rollout_with_zero_calls_plans_no_traces():
    plan = plan_rollout(build_response([]))
    assert plan.traces == () and plan.violations == ()


# ---------------------------------------------------------------------------------------------
# the four cases from the review


def _two_calls(prompt2: list[int], *, append: bool, event_applies: int | None = None, **kw):
    c1 = Call([1], [2])
    c2 = Call(prompt2, [3])
    resp = build_response([c1, c2], **kw)
    resp["model_call_metadata"][1]["expected_append_compatible"] = append
    if event_applies is not None:
        resp["boundary_events"] = [{"event_id": "b2", "trigger_after_step": 1, "applies_to_step": event_applies}]
        resp["model_call_metadata"][1]["compaction_event_id"] = "b2"
    return resp


def test_declared_append_compatible_turn_that_does_not_extend_is_rejected():
    with pytest.raises(ContractError) as info:
        plan_rollout(_two_calls([9], append=True))
    err = info.value
    assert (err.code, err.rollout_id, err.turn_id) == ("append_declaration_mismatch", "rollout-0", 2)
    assert "append-compatibility declaration disagrees" in str(err)


def test_declared_append_compatible_turn_that_extends_is_accepted():
    plan = plan_rollout(_two_calls([1, 2, 5], append=True))
    assert [t.turn_ids for t in plan.traces] == [(1, 2)]


def test_boundary_event_on_an_append_compatible_turn_is_rejected():
    resp = _two_calls([1, 2, 5], append=True, event_applies=2)
    with pytest.raises(ContractError) as info:
        plan_rollout(resp)
    err = info.value
    assert (err.code, err.turn_id) == ("boundary_without_rewrite", 2)
    assert "does not correspond to a rewrite" in str(err)


def test_boundary_event_on_a_real_rewrite_is_accepted():
    plan = plan_rollout(_two_calls([7, 8], append=False, event_applies=2))
    assert [t.turn_ids for t in plan.traces] == [(1,), (2,)]


def test_ghost_media_with_empty_media_assets_is_rejected():
    resp = build_response([Call([1], [2])])
    resp["model_call_metadata"][0]["media_ids"] = ["ghost"]
    resp["media_assets"] = {}
    with pytest.raises(ContractError) as info:
        plan_rollout(resp)
    err = info.value
    assert (err.code, err.turn_id) == ("unknown_media_asset", 1)
    assert "media id 'ghost' is not in media_assets (0 assets)" in str(err)


def test_known_media_is_accepted():
    plan = plan_rollout(build_response([Call([1], [2], media=["ghost"])]))
    assert plan.traces[0].media_ids == ("ghost",)


def test_two_sampled_ids_with_one_logprob_are_rejected():
    resp = build_response([Call([1], [2, 3], logprobs=[-0.1])])
    with pytest.raises(ContractError) as info:
        plan_rollout(resp)
    err = info.value
    assert (err.code, err.turn_id) == ("token_logprob_length_mismatch", 1)
    assert "generation_token_ids has 2 ids, generation_log_probs has 1" in str(err)


def test_two_sampled_ids_with_two_logprobs_are_accepted():
    plan = plan_rollout(build_response([Call([1], [2, 3], logprobs=[-0.1, -0.2])]))
    assert plan.traces[0].num_sampled_tokens == 2


# ---------------------------------------------------------------------------------------------
# the other declaration rules


def test_undeclared_discontinuity_under_a_contract_is_rejected():
    with pytest.raises(ContractError) as info:
        plan_rollout(_two_calls([9], append=False))
    err = info.value
    assert (err.code, err.turn_id) == ("undeclared_discontinuity", 2)
    assert "no boundary event declares a rewrite" in str(err)
    assert "media continuity: kept ([] -> [])" in str(err)


def test_declared_non_append_without_boundary_on_a_continuation_is_rejected():
    with pytest.raises(ContractError) as info:
        plan_rollout(_two_calls([1, 2, 4], append=False))
    assert info.value.code == "append_declaration_mismatch"
    assert "declared not append-compatible without a boundary event" in str(info.value)


def test_first_call_declared_append_compatible_is_rejected():
    resp = build_response([Call([1], [2])])
    resp["model_call_metadata"][0]["expected_append_compatible"] = True
    with pytest.raises(ContractError) as info:
        plan_rollout(resp)
    assert (info.value.code, info.value.turn_id) == ("append_declaration_mismatch", 1)
    assert "no previous call to extend" in str(info.value)


def test_a_first_call_declaring_both_append_and_boundary_is_the_append_mismatch():
    """Golden spec §6: for the first call the declared append is checked before the declared boundary."""
    resp = build_response([Call([1], [2])])
    resp["boundary_events"] = [{"event_id": "b1", "trigger_after_step": 0, "applies_to_step": 1}]
    resp["model_call_metadata"][0].update(compaction_event_id="b1", expected_append_compatible=True)
    with pytest.raises(ContractError) as info:
        plan_rollout(resp)
    assert (info.value.code, info.value.turn_id) == ("append_declaration_mismatch", 1)


@pytest.mark.parametrize("value, turn", [({"turn_id": 1}, None), ([7], 1), ([{"turn_id": "one"}], 1)])
def test_a_record_list_the_shape_does_not_read_must_still_be_a_list_of_records(value, turn):
    """Golden spec §3 (order of errors, step 2): a transport response reads `model_call_metadata`, yet a
    `completion_evidence` beside it that is not a list, or holds a bad record, is `malformed_payload`."""
    resp = build_response([Call([1, 2], [3])])
    assert "completion_evidence" not in resp
    resp["completion_evidence"] = value
    with pytest.raises(ContractError) as info:
        plan_rollout(resp)
    assert (info.value.code, info.value.rollout_id, info.value.turn_id) == ("malformed_payload", "rollout-0", turn)


def test_the_contract_rollout_id_falls_back_to_the_trace_contract_s_when_the_compaction_contract_s_is_unreadable():
    """Golden spec §3: the rollout an error names is `context_compaction_contract.rollout_id` when a string, else
    `rollout_trace_contract.rollout_id`."""
    resp = build_response([Call([1, 2], [3])])
    resp["rollout_trace_contract"] = {"rollout_id": "from-the-trace-contract"}
    resp["context_compaction_contract"]["rollout_id"] = 7
    with pytest.raises(ContractError) as info:
        plan_rollout(resp)
    assert (info.value.code, info.value.rollout_id) == ("malformed_payload", "from-the-trace-contract")


def test_boundary_applied_to_the_first_call_is_rejected():
    resp = build_response([Call([1], [2])])
    resp["boundary_events"] = [{"event_id": "b1", "trigger_after_step": 0, "applies_to_step": 1}]
    resp["model_call_metadata"][0]["compaction_event_id"] = "b1"
    with pytest.raises(ContractError) as info:
        plan_rollout(resp)
    assert (info.value.code, info.value.turn_id) == ("boundary_without_rewrite", 1)


def test_dangling_compaction_event_id_is_rejected():
    resp = _two_calls([7], append=False, event_applies=2)
    resp["model_call_metadata"][1]["compaction_event_id"] = "nope"
    with pytest.raises(ContractError) as info:
        plan_rollout(resp)
    assert (info.value.code, info.value.turn_id) == ("orphan_compaction_event", 2)
    assert "compaction_event_id 'nope' names no boundary event" in str(info.value)


def test_compaction_event_applying_to_another_step_is_rejected():
    resp = _two_calls([7], append=False, event_applies=2)
    resp["boundary_events"][0]["applies_to_step"] = 5
    with pytest.raises(ContractError) as info:
        plan_rollout(resp)
    assert info.value.code == "orphan_compaction_event"
    assert "applies_to_step=5, not this turn" in str(info.value)


def test_boundary_event_not_referenced_by_its_call_is_rejected():
    resp = _two_calls([7], append=False, event_applies=2)
    resp["boundary_events"].append({"event_id": "b9", "trigger_after_step": 8, "applies_to_step": 9})
    with pytest.raises(ContractError) as info:
        plan_rollout(resp)
    assert info.value.code == "orphan_compaction_event"
    assert "'b9' applies_to_step=9 but the rollout has no such call (2 calls)" in str(info.value)


def test_several_boundaries_split_several_traces():
    c1 = Call([1], [2])
    c2 = Call([5], [6], boundary=True)
    c3 = continuing(c2, [7], [8])
    c4 = Call([9], [10], boundary=True)
    plan = plan_rollout(build_response([c1, c2, c3, c4]))
    assert [t.turn_ids for t in plan.traces] == [(1,), (2, 3), (4,)]


# ---------------------------------------------------------------------------------------------
# structural checks


def test_digest_mismatch_is_rejected(example_transport):
    bad = copy.deepcopy(example_transport)
    bad["model_call_metadata"][1]["generation_evidence_digest"] = "0" * 64
    with pytest.raises(ContractError) as info:
        plan_rollout(bad)
    assert (info.value.code, info.value.turn_id, info.value.rollout_id) == (
        "evidence_digest_mismatch",
        2,
        "rollout-demo-0",
    )
    assert "does not recompute from the output item's token arrays" in str(info.value)


def test_full_envelope_arrays_must_agree_with_output_items():
    resp = compacted_three_calls("full")
    resp["completion_evidence"][0]["sampled_token_ids"] = [99, 98]
    with pytest.raises(ContractError) as info:
        plan_rollout(resp)
    assert (info.value.code, info.value.turn_id) == ("evidence_digest_mismatch", 1)


def test_metadata_count_mismatch_is_rejected():
    resp = compacted_three_calls()
    resp["model_call_metadata"].pop()
    with pytest.raises(ContractError) as info:
        plan_rollout(resp)
    assert info.value.code == "metadata_count_mismatch"
    assert "2 per-call records but 3 token-bearing output items" in str(info.value)


def test_partial_token_fields_are_missing_token_evidence():
    resp = compacted_three_calls()
    item = next(i for i in resp["output"] if "generation_token_ids" in i)
    del item["generation_log_probs"]
    with pytest.raises(ContractError) as info:
        plan_rollout(resp)
    assert info.value.code == "missing_token_evidence"
    assert "but not ['generation_log_probs']" in str(info.value)


def test_turn_ids_out_of_order_are_rejected():
    resp = compacted_three_calls()
    resp["model_call_metadata"][1]["turn_id"] = 5
    with pytest.raises(ContractError) as info:
        plan_rollout(resp)
    assert (info.value.code, info.value.turn_id) == ("turn_order", 5)
    assert "call #2 in output order has turn_id 5; expected 2" in str(info.value)


def test_record_from_another_rollout_is_rejected():
    resp = compacted_three_calls()
    resp["model_call_metadata"][2]["rollout_id"] = "intruder"
    with pytest.raises(ContractError) as info:
        plan_rollout(resp)
    assert (info.value.code, info.value.turn_id) == ("rollout_id_mismatch", 3)


def test_unknown_schema_version_is_unsupported(example_transport):
    bad = copy.deepcopy(example_transport)
    bad["context_compaction_contract"]["schema_version"] = 4
    with pytest.raises(ContractError) as info:
        plan_rollout(bad)
    assert info.value.code == "unsupported_contract"
    assert "schema_version=4; supported: 2 (full), 3 (transport)" in str(info.value)


def test_unknown_mode_is_unsupported(example_transport):
    bad = copy.deepcopy(example_transport)
    bad["context_compaction_contract"]["mode"] = "advisory"
    with pytest.raises(ContractError) as info:
        plan_rollout(bad)
    assert info.value.code == "unsupported_contract"


def test_unknown_contract_key_is_unsupported():
    resp = build_response([Call([1], [2])], flavour="none")
    resp["trajectory_trace_contract"] = {"rollout_id": "r"}
    with pytest.raises(ContractError) as info:
        plan_rollout(resp)
    assert info.value.code == "unsupported_contract"
    assert "trajectory_trace_contract" in str(info.value)


def test_pr2870_contract_with_schema_version_is_unsupported(example_pr2870):
    bad = copy.deepcopy(example_pr2870)
    bad["rollout_trace_contract"]["schema_version"] = 3
    with pytest.raises(ContractError) as info:
        plan_rollout(bad)
    assert info.value.code == "unsupported_contract"


def test_malformed_payload_names_the_field_path():
    resp = compacted_three_calls()
    resp["model_call_metadata"][1]["turn_id"] = "two"
    with pytest.raises(ContractError) as info:
        plan_rollout(resp)
    err = info.value
    assert err.code == "malformed_payload"
    assert err.turn_id == 2
    assert "model_call_metadata[1].turn_id" in str(err)


def test_string_token_id_is_malformed_and_names_the_item():
    resp = compacted_three_calls()
    item = next(i for i in resp["output"] if "generation_token_ids" in i)
    item["generation_token_ids"] = [1, "2"]
    with pytest.raises(ContractError) as info:
        plan_rollout(resp)
    assert info.value.code == "malformed_payload"
    assert "output[1].generation_token_ids[1]" in str(info.value)


def test_non_object_result_is_malformed():
    with pytest.raises(ContractError) as info:
        plan_rollout([1, 2])  # type: ignore[arg-type]
    assert info.value.code == "malformed_payload"
    assert "a result must be a JSON object, got list" in str(info.value)


def test_nan_logprob_is_malformed():
    resp = build_response([Call([1], [2], logprobs=[float("nan")])])
    with pytest.raises(ContractError) as info:
        plan_rollout(resp)
    assert info.value.code == "malformed_payload"


# ---------------------------------------------------------------------------------------------
# routes


def _routes(rows: int, layers: int = 2, k: int = 2) -> list:
    return [[[j, j + 1] for j in range(layers)] for _ in range(rows)]


def test_routes_with_one_surplus_row_are_accepted():
    plan = plan_rollout(build_response([Call([1, 2], [3], routes=_routes(4))]))
    assert plan.evidence.calls[0].routed_experts.shape == (4, 2, 2)


def test_routes_with_two_surplus_rows_are_rejected():
    with pytest.raises(ContractError) as info:
        plan_rollout(build_response([Call([1, 2], [3], routes=_routes(5))]))
    assert info.value.code == "routed_experts_shape"
    assert "5 rows for 3 tokens" in str(info.value)


def test_routes_with_too_few_rows_are_rejected():
    with pytest.raises(ContractError) as info:
        plan_rollout(build_response([Call([1, 2], [3], routes=_routes(2))]))
    assert info.value.code == "routed_experts_shape"


def test_partly_negative_route_row_is_rejected():
    routes = _routes(3)
    routes[1][0] = [-1, 4]
    with pytest.raises(ContractError) as info:
        plan_rollout(build_response([Call([1, 2], [3], routes=routes)]))
    assert "row 1 layer 0 is partly -1" in str(info.value)


def test_all_negative_route_row_is_a_valid_missing_route():
    routes = _routes(3)
    routes[1][0] = [-1, -1]
    assert plan_rollout(build_response([Call([1, 2], [3], routes=routes)])).trainable


def test_route_shapes_must_agree_across_calls():
    c1 = Call([1], [2], routes=_routes(2))
    c2 = continuing(c1, [], [3], routes=_routes(3, layers=3))
    with pytest.raises(ContractError) as info:
        plan_rollout(build_response([c1, c2]))
    assert info.value.code == "routed_experts_shape"
    assert "[layers, topk]=[3, 2] but earlier calls have [2, 2]" in str(info.value)


def test_routes_in_the_nrlre1_envelope_are_decoded():
    arr = np.arange(3 * 2 * 2, dtype="<i2").reshape(3, 2, 2)
    text = "nrlre1:int16:3x2x2:" + base64.b64encode(arr.tobytes()).decode()
    plan = plan_rollout(build_response([Call([1, 2], [3], routes=text)]))
    np.testing.assert_array_equal(plan.evidence.calls[0].routed_experts, arr)


def test_bad_route_envelope_is_rejected():
    with pytest.raises(ContractError) as info:
        plan_rollout(build_response([Call([1, 2], [3], routes="nrlre1:int16:3x2x2:AAAA")]))
    assert info.value.code == "routed_experts_shape"
    assert "needs 24 bytes, got 3" in str(info.value)


# ---------------------------------------------------------------------------------------------
# non-strict


def test_non_strict_plan_lists_every_violation_with_inferred_boundaries():
    c1 = Call([1], [2], media=["m1"])
    c2 = Call([9], [3])  # undeclared discontinuity
    c3 = continuing(c2, [4], [5, 6], logprobs=[-0.1])  # length mismatch
    resp = build_response([c1, c2, c3])
    resp["model_call_metadata"][1]["expected_append_compatible"] = False
    resp["model_call_metadata"][1]["media_ids"] = ["ghost"]
    resp["model_call_metadata"][2]["media_ids"] = ["ghost"]
    plan = plan_rollout(resp, strict=False)
    assert not plan.trainable
    assert [(v.code, v.turn_id) for v in plan.violations] == [
        ("unknown_media_asset", 2),
        ("token_logprob_length_mismatch", 3),
        ("unknown_media_asset", 3),
        ("undeclared_discontinuity", 2),
    ]
    assert [(t.turn_ids, t.start_reason) for t in plan.traces] == [
        ((1,), "rollout_start"),
        ((2, 3), "inferred_discontinuity"),
    ]


def test_non_strict_plan_of_unreadable_payload_reports_it_without_raising():
    plan = plan_rollout({"output": 5}, strict=False)
    assert plan.traces == ()
    assert [v.code for v in plan.violations] == ["malformed_payload"]


def test_strict_plan_raises_the_first_violation_of_the_non_strict_list():
    resp = compacted_three_calls()
    resp["model_call_metadata"][2]["media_ids"].append("ghost")
    resp["model_call_metadata"][0]["generation_evidence_digest"] = "f" * 64
    first = plan_rollout(resp, strict=False).violations[0]
    with pytest.raises(ContractError) as info:
        plan_rollout(resp)
    assert (info.value.code, info.value.turn_id) == (first.code, first.turn_id) == ("evidence_digest_mismatch", 1)


# ---------------------------------------------------------------------------------------------
# the mutation catalogue


def _refusal(mutation: Mutation, bad: dict) -> ContractError:
    """The error `bad` gets where `mutation` says it is found: planning it, or (images) materializing its rows."""
    result = bad if "response" in bad else run_result(bad, reward=1.0)
    if mutation.stage == "materialize":
        plan = plan_rollout(result)  # the planner reads no pixels
        cfg = TrainerConfig.model_validate({"grpo": {"num_prompts_per_step": 1, "num_generations_per_prompt": 1},
                                            "policy": {"train_global_batch_size": 1}})
        with pytest.raises(ContractError) as info:
            materialize([plan], cfg)
    else:
        with pytest.raises(ContractError) as info:
            plan_rollout(result)
    return info.value


@pytest.mark.parametrize("flavour", ["transport", "full", "pr2870"])
@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.name)
def test_each_mutation_raises_its_documented_code(mutation, flavour):
    base = compacted_three_calls(flavour)
    assert plan_rollout(base).trainable
    try:
        bad = mutation.apply(base)
    except MutationNotApplicable:
        pytest.skip(f"{mutation.name} does not apply to {flavour}")
    assert _refusal(mutation, run_result(bad) if flavour == "full" else bad).code == mutation.code


def test_each_mutation_applies_to_the_reference_example(example_transport):
    applied = []
    for mutation in MUTATIONS:
        try:
            bad = mutation.apply(example_transport)
        except MutationNotApplicable:
            continue
        applied.append(mutation.name)
        assert _refusal(mutation, bad).code == mutation.code, mutation.name
    assert {"undecodable_image", "misstate_image_dimensions"} <= set(applied)  # its image is in Gym's form


def test_legacy_images_are_binned_per_turn_from_input_and_observations():
    image = {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "auto"}
    other = {**image, "detail": "high"}
    resp = build_response([Call([1], [2]), Call([1, 2, 3], [4]), Call([1, 2, 3, 4, 5], [6])], flavour="none")
    token_items = [i for i in resp["output"] if "generation_token_ids" in i]
    obs1 = {"type": "message", "role": "user", "content": [other, {"type": "input_text", "text": "s1"}]}
    obs2 = {"type": "message", "role": "user", "content": [image]}
    resp["output"] = [token_items[0], obs1, token_items[1], obs2, token_items[2]]
    result = {"responses_create_params": {"input": [{"type": "message", "role": "user", "content": [image]}]},
              "response": resp, "reward": 1.0}
    plan = plan_rollout(result)
    a, b = "media-" + canonical_digest(image)[:24], "media-" + canonical_digest(other)[:24]
    assert [c.media_ids for c in plan.evidence.calls] == [(a,), (a, b), (a, b, a)]
    assert plan.traces[0].media_ids == (a, b, a)
    assert plan.evidence.media_assets[b].source_part == other


def test_a_token_item_echoed_in_the_request_input_is_no_call_and_shifts_no_images():
    """Only `output`'s token items are calls (golden spec §4): one echoed in the request input took a call's slot,
    so every call showed the images of the call before it."""
    image = {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}
    resp = build_response([Call([1], [2]), Call([1, 2, 3], [4])], flavour="none")
    first, second = [i for i in resp["output"] if "generation_token_ids" in i]
    resp["output"] = [first, {"type": "message", "role": "user", "content": [image]}, second]
    result = {"responses_create_params": {"input": [dict(first), {"type": "message", "role": "user", "content": [image]}]},
              "response": resp, "reward": 1.0}
    a = "media-" + canonical_digest(image)[:24]
    assert [c.media_ids for c in plan_rollout(result).evidence.calls] == [(a,), (a, a)]
