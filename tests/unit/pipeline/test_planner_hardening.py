"""Issue 15: every hostile input gets a typed answer that names the field, rollout and turn."""

from __future__ import annotations

import base64
import copy
from typing import Any

import numpy as np
import pytest

from compactsim.harness.core.digests import canonical_digest, generation_evidence_digest
from compactsim.harness.core.errors import ContractError
from compactsim.harness.core.images import png_data_url
from compactsim.harness.pipeline.ingest import MAX_ROUTE_ELEMENTS
from compactsim.harness.pipeline.planner import plan_rollout
from compactsim.scenarios.payloads import Call, build_response, compacted_three_calls, continuing, run_result

IMAGE = "media-e5214ee50da1954c70348ac5"  # the reference example's content-addressed image


def _refusal(payload: Any) -> tuple[str, str | None, int | None]:
    """Strict refusal as (code, rollout, turn); non-strict planning reports the same first violation."""
    plan = plan_rollout(payload, strict=False)
    with pytest.raises(ContractError) as info:
        plan_rollout(payload)
    err = info.value
    assert (plan.violations[0].code, plan.violations[0].turn_id) == (err.code, err.turn_id)
    return err.code, err.rollout_id, err.turn_id


def _items(resp: dict[str, Any]) -> list[dict[str, Any]]:
    return [i for i in resp["output"] if "generation_token_ids" in i]


def _reseal(resp: dict[str, Any], k: int) -> None:
    item = _items(resp)[k]
    resp["model_call_metadata"][k]["generation_evidence_digest"] = generation_evidence_digest(
        item["prompt_token_ids"], item["generation_token_ids"], item["generation_log_probs"]
    )


def _png(colour: tuple[int, int, int]) -> str:
    return png_data_url(np.full((1, 1, 3), colour, dtype=np.uint8))


# ------------------------------------------------------------------------------------ numbers


def test_positive_logprob_with_a_resealed_digest_is_logprob_out_of_range(example_transport):
    bad = copy.deepcopy(example_transport)
    bad["output"][4]["generation_log_probs"][1] = 3.5
    _reseal(bad, 1)
    assert _refusal(bad) == ("logprob_out_of_range", "rollout-demo-0", 2)
    with pytest.raises(ContractError, match=r"generation_log_probs\[1\]=3.5: a log-probability must be <= 0"):
        plan_rollout(bad)


def test_huge_positive_integer_logprob_is_malformed_not_an_inexact_float(example_transport):
    # an integer beyond +-2**53 is not an exact float: refused by the integer bound (it used to slip
    # through the float branch of the union as 1.15e18 and only then hit the sign check)
    bad = copy.deepcopy(example_transport)
    bad["output"][6]["generation_log_probs"][0] = 2**60
    _reseal(bad, 2)
    assert _refusal(bad) == ("malformed_payload", "rollout-demo-0", 3)
    with pytest.raises(ContractError) as info:
        plan_rollout(bad)
    assert info.value.detail == (
        "response.output[6].generation_log_probs[0]: Input should be less than or equal to 9007199254740992"
    )


def test_huge_positive_float_logprob_is_still_out_of_range(example_transport):
    bad = copy.deepcopy(example_transport)
    bad["output"][6]["generation_log_probs"][0] = 1e30  # finite in float32: the planner's sign rule answers
    _reseal(bad, 2)
    assert _refusal(bad) == ("logprob_out_of_range", "rollout-demo-0", 3)


def test_twenty_digit_negative_integer_logprob_is_malformed_and_names_field_rollout_turn(example_transport):
    bad = copy.deepcopy(example_transport)
    bad["output"][6]["generation_log_probs"][0] = -99999999999999999999
    _reseal(bad, 2)
    assert _refusal(bad) == ("malformed_payload", "rollout-demo-0", 3)
    with pytest.raises(ContractError) as info:
        plan_rollout(bad)
    assert info.value.detail == (
        "response.output[6].generation_log_probs[0]: Input should be greater than or equal to -9007199254740992"
    )


@pytest.mark.parametrize("value", [-1e308, -3.5e38, 1e300])
def test_logprob_beyond_float32_is_malformed_at_validation_with_the_turn(value, example_transport):
    # finite in float64 but -inf/inf once the batch is float32: refused here, naming field, rollout and turn
    bad = copy.deepcopy(example_transport)
    bad["output"][6]["generation_log_probs"][0] = value
    _reseal(bad, 2)
    assert _refusal(bad) == ("malformed_payload", "rollout-demo-0", 3)
    with pytest.raises(ContractError) as info:
        plan_rollout(bad)
    assert info.value.detail == (
        f"response.output[6].generation_log_probs[0]: Input should be within float32's finite range "
        f"(|x| <= 3.4028234663852886e+38), got {value!r}"
    )


def test_logprob_at_the_float32_edge_and_integer_logprobs_are_unchanged(example_transport):
    from compactsim.harness.core.contract import FLOAT32_MAX, TokenFields

    base = {"prompt_token_ids": [1], "generation_token_ids": [2, 3, 4, 5]}
    fields = TokenFields.model_validate({**base, "generation_log_probs": [-FLOAT32_MAX, -1, -0.5, 0]})
    assert fields.generation_log_probs == [-FLOAT32_MAX, -1, -0.5, 0]
    assert [type(v) for v in fields.generation_log_probs] == [float, int, float, int]  # digests hash what was sent
    assert plan_rollout(copy.deepcopy(example_transport)).trainable


@pytest.mark.parametrize(
    ("label", "message"),
    [
        (99999999999999999999, "trainer_policy_version: Input should be less than 2147483648"),
        (2**31, "trainer_policy_version: Input should be less than 2147483648"),
        (-5, "trainer_policy_version: Input should be greater than or equal to 0"),
        ("3", "trainer_policy_version: Input should be a valid integer"),
        (True, "trainer_policy_version: Input should be a valid integer"),
        (1.0, "trainer_policy_version: Input should be a valid integer"),
    ],
)
def test_trainer_policy_version_label_is_a_non_negative_int32(label, message, example_transport):
    # it used to be ignored when not an int, and a 20-digit one overflowed the materializer's int64 tensor
    result = {**run_result(example_transport), "trainer_policy_version": label}
    with pytest.raises(ContractError) as info:
        plan_rollout(result)
    err = info.value
    assert (err.code, err.rollout_id, err.detail) == ("malformed_payload", "rollout-demo-0", message)


def test_trainer_policy_version_label_fills_calls_without_a_version(example_transport):
    from compactsim.harness.pipeline.ingest import normalize_result

    for label in (0, 7, 2**31 - 1):
        evidence = normalize_result({**run_result(example_transport), "trainer_policy_version": label})
        assert {c.policy_version for c in evidence.calls} == {label}
    evidence = normalize_result({**run_result(example_transport), "trainer_policy_version": None})
    assert {c.policy_version for c in evidence.calls} == {None}


def test_zero_logprob_is_a_valid_certain_token():
    resp = build_response([Call([1], [2, 3], logprobs=[0.0, -0.0])])
    assert plan_rollout(resp).trainable


@pytest.mark.parametrize("value", [10**400, -(10**400), -(2**60) * 10**300])
def test_logprob_too_large_for_a_float_is_malformed_and_names_the_turn(value, example_transport):
    bad = copy.deepcopy(example_transport)
    bad["output"][6]["generation_log_probs"][0] = value
    code, rollout, turn = _refusal(bad)
    assert (code, rollout, turn) == ("malformed_payload", "rollout-demo-0", 3)


def test_huge_logprob_integer_message_names_the_field_and_the_bound(example_transport):
    bad = copy.deepcopy(example_transport)
    bad["output"][6]["generation_log_probs"][0] = 10**400
    with pytest.raises(ContractError) as info:
        plan_rollout(bad)
    assert info.value.detail == (
        "response.output[6].generation_log_probs[0]: Input should be less than or equal to 9007199254740992"
    )


@pytest.mark.parametrize(
    ("reward", "message"),
    [
        (10**400, "reward: Input should be less than or equal to 9007199254740992"),
        (float("nan"), "reward: Input should be a finite number"),
        (float("inf"), "reward: Input should be a finite number"),
        (1e300, "reward: Input should be less than or equal to 9007199254740992"),
    ],
)
def test_reward_must_be_finite_and_bounded(reward, message, example_transport):
    result = {"response": example_transport, "reward": reward}
    assert _refusal(result) == ("malformed_payload", "rollout-demo-0", None)
    with pytest.raises(ContractError) as info:
        plan_rollout(result)
    assert info.value.detail.startswith(message)


@pytest.mark.parametrize(
    ("field", "value"),
    [("turn_id", 2**31), ("context_epoch", -1), ("policy_version", 10**30), ("segment_index", 2**64)],
)
def test_record_integers_are_bounded(field, value, example_transport):
    bad = copy.deepcopy(example_transport)
    bad["model_call_metadata"][1][field] = value
    assert _refusal(bad) == ("malformed_payload", "rollout-demo-0", 2)
    with pytest.raises(ContractError, match=rf"model_call_metadata\[1\]\.{field}: Input should be"):
        plan_rollout(bad)


# ------------------------------------------------------------------------------------ routes


@pytest.mark.parametrize(
    ("envelope", "message"),
    [
        ("nrlre1:int8:-2x-2x1:AQEBAQ==", "envelope shape '-2x-2x1' is not SxLxK with three positive decimal dimensions"),
        ("nrlre1:int8:4294967296x4294967296x1:", "has 18446744073709551616 entries; the cap is 268435456"),
        ("nrlre1:int8:4294967296x4294967296x1:AQEBAQ==", "has 18446744073709551616 entries; the cap is 268435456"),
        ("nrlre1:int8:0x2x2:", "envelope shape [0, 2, 2] has a zero dimension"),
        ("nrlre1:int8:5x1x0:", "envelope shape [5, 1, 0] has a zero dimension"),
        ("nrlre1:int8:+5x1x1:AAAAAAA=", "envelope shape '+5x1x1' is not SxLxK"),
        ("nrlre1:int8:\u0665x1x1:AAAAAAA=", "is not SxLxK with three positive decimal dimensions"),
        ("nrlre1:int8:5x1:AAAAAAA=", "envelope shape '5x1' is not SxLxK"),
        ("nrlre1:int8:5x1x1:AAAA", "envelope shape [5, 1, 1] needs 5 bytes, got 3"),
        ("nrlre1:int8:5x1x1:AAA", "envelope payload is not valid base64"),
        ("nrlre1:int8:5x1x1:AAAA*A=", "envelope payload is not valid base64"),
    ],
)
def test_bad_route_envelopes_are_routed_experts_shape(envelope, message, example_transport):
    bad = copy.deepcopy(example_transport)
    bad["output"][1]["routed_experts"] = envelope  # call 1: 3 prompt + 2 sampled tokens
    assert _refusal(bad) == ("routed_experts_shape", "rollout-demo-0", 1)
    with pytest.raises(ContractError) as info:
        plan_rollout(bad)
    assert message in info.value.detail


def test_route_cap_is_268m_entries():
    assert MAX_ROUTE_ELEMENTS == 2**28


def test_valid_envelope_still_decodes(example_transport):
    good = copy.deepcopy(example_transport)
    arr = np.tile(np.arange(2, dtype=np.int8), (5, 3, 1))
    good["output"][1]["routed_experts"] = "nrlre1:int8:5x3x2:" + base64.b64encode(arr.tobytes()).decode()
    plan = plan_rollout(good)
    np.testing.assert_array_equal(plan.evidence.calls[0].routed_experts, arr.astype(np.int64))


@pytest.mark.parametrize("routes", [[[[]]] * 3, [[]] * 3])
def test_zero_width_routes_are_refused_at_planning(routes):
    resp = build_response([Call([1, 2], [3], routes=routes)])
    code, _, turn = _refusal(resp)
    assert (code, turn) == ("routed_experts_shape", 1)


def test_zero_topk_routes_name_the_rule():
    with pytest.raises(ContractError, match=r"routed_experts shape \[3, 1, 0\]: every token needs at least one layer"):
        plan_rollout(build_response([Call([1, 2], [3], routes=[[[]]] * 3)]))


def test_expert_id_below_the_sentinel_is_routed_expert_id_out_of_range():
    arr = np.zeros((3, 2, 2), dtype=np.int16)
    arr[1, 1, 0] = -2
    text = "nrlre1:int16:3x2x2:" + base64.b64encode(arr.astype("<i2").tobytes()).decode()
    c1 = Call([1], [2])
    resp = build_response([c1, continuing(c1, [], [3], routes=text)])
    assert _refusal(resp) == ("routed_expert_id_out_of_range", "rollout-0", 2)
    with pytest.raises(ContractError, match=r"routed_experts\[1\]\[1\]\[0\]=-2: expert ids are >= 0"):
        plan_rollout(resp)


def test_expert_id_below_the_sentinel_in_a_list_is_malformed_and_names_the_element():
    resp = build_response([Call([1, 2], [3], routes=[[[0, 1]], [[-5, 1]], [[0, 1]]])])
    assert _refusal(resp) == ("malformed_payload", "rollout-0", 1)
    with pytest.raises(ContractError) as info:
        plan_rollout(resp)
    assert info.value.detail == "response.output[1].routed_experts[1][0][0]: Input should be greater than or equal to -1"


# ------------------------------------------------------------------------------------- media


def test_replaced_pixels_with_the_same_id_and_digest_are_media_digest_mismatch(example_transport):
    bad = copy.deepcopy(example_transport)
    bad["media_assets"][IMAGE]["source_part"]["image_url"] = _png((0, 0, 255))
    assert _refusal(bad) == ("media_digest_mismatch", "rollout-demo-0", 2)
    with pytest.raises(ContractError, match="does not recompute from its source_part"):
        plan_rollout(bad)


def test_replaced_pixels_with_a_recomputed_digest_still_break_the_content_addressed_id(example_transport):
    bad = copy.deepcopy(example_transport)
    asset = bad["media_assets"][IMAGE]
    asset["source_part"]["image_url"] = _png((0, 0, 255))
    asset["content_digest"] = canonical_digest(asset["source_part"])
    assert _refusal(bad) == ("media_digest_mismatch", "rollout-demo-0", 2)
    with pytest.raises(ContractError, match="the content-addressed id does not match its source_part"):
        plan_rollout(bad)


def test_reference_example_digest_recomputes_from_its_part(example_transport):
    asset = example_transport["media_assets"][IMAGE]
    assert canonical_digest(asset["source_part"]) == asset["content_digest"]
    assert plan_rollout(example_transport).trainable


def test_a_wholly_re_registered_image_is_consistent_and_accepted(example_transport):
    """New pixels under their own new id and digest (references updated) is a different, valid image."""
    good = copy.deepcopy(example_transport)
    part = {"type": "input_image", "image_url": _png((0, 0, 255)), "detail": "auto"}
    digest = canonical_digest(part)
    new_id = "media-" + digest[:24]
    good["media_assets"] = {new_id: {**good["media_assets"][IMAGE], "media_id": new_id, "content_digest": digest,
                                     "source_part": part}}
    for rec in good["model_call_metadata"]:
        rec["media_ids"] = [new_id if m == IMAGE else m for m in rec["media_ids"]]
    assert plan_rollout(good).trainable


def test_asset_filed_under_another_key_is_media_asset_key_mismatch(example_transport):
    bad = copy.deepcopy(example_transport)
    other = "media-" + "0" * 24
    bad["media_assets"][other] = bad["media_assets"].pop(IMAGE)
    for rec in bad["model_call_metadata"]:
        rec["media_ids"] = [other if m == IMAGE else m for m in rec["media_ids"]]
    assert _refusal(bad) == ("media_asset_key_mismatch", "rollout-demo-0", 2)
    with pytest.raises(ContractError) as info:
        plan_rollout(bad)
    assert info.value.detail == f"media_assets['{other}'] holds the asset of media id '{IMAGE}'"


def test_unused_asset_under_a_wrong_key_names_no_turn():
    resp = compacted_three_calls()
    resp["media_assets"]["spare"] = copy.deepcopy(resp["media_assets"]["screen-a"])
    assert _refusal(resp) == ("media_asset_key_mismatch", "rollout-0", None)


def test_opaque_media_ids_make_no_content_claim():
    """Ids outside Gym's `media-<24 hex>` form (hand-written payloads) are not content-addressed."""
    assert plan_rollout(compacted_three_calls()).trainable


def test_deeply_nested_source_part_is_malformed_not_a_recursion_error(example_transport):
    bad = copy.deepcopy(example_transport)
    deep: Any = 0
    for _ in range(100_000):
        deep = [deep]
    bad["media_assets"][IMAGE]["source_part"]["extra"] = deep
    assert _refusal(bad) == ("malformed_payload", "rollout-demo-0", None)
    with pytest.raises(ContractError, match=r"source_part: nests deeper than 64 levels"):
        plan_rollout(bad)


def test_deeply_nested_legacy_image_part_is_malformed():
    c1 = Call([1], [2])
    resp = build_response([c1, continuing(c1, [], [3])], flavour="none")
    deep: Any = "x"
    for _ in range(5000):
        deep = {"k": deep}
    resp["output"].insert(2, {"type": "message", "role": "user", "content": [{"type": "input_image", "image_url": deep}]})
    assert _refusal(resp) == ("malformed_payload", "resp-rollout-0", None)



@pytest.mark.parametrize(("value", "got"), [(None, "null"), (7, "a number"), (["r"], "an array"), ("absent", "no id")])
def test_a_legacy_response_without_a_string_id_is_malformed_before_its_token_items(value, got):
    """Without a contract the response `id` is the logical rollout id: none (or a non-string) would train under a
    made-up name, and two such results would collide. The refusal comes before the token items' own errors."""
    c1 = Call([1], [2])
    resp = build_response([c1, continuing(c1, [], [3])], flavour="none")
    if value == "absent":
        del resp["id"]
    else:
        resp["id"] = value
    _items(resp)[1]["generation_log_probs"] = ["not a number"]  # a later §3 error: the id's comes first
    assert _refusal(resp) == ("malformed_payload", None, None)
    with pytest.raises(ContractError, match=f"response.id: a response without a contract needs a string id .*got {got}$"):
        plan_rollout(resp)


# ------------------------------------------------------------------- diagnostics name the turn


def test_call_whose_only_token_item_lost_its_fields_is_named(example_transport):
    bad = copy.deepcopy(example_transport)
    for field in ("prompt_token_ids", "generation_token_ids", "generation_log_probs"):
        del bad["output"][6][field]
    assert _refusal(bad) == ("missing_token_evidence", "rollout-demo-0", 3)
    with pytest.raises(ContractError) as info:
        plan_rollout(bad)
    assert info.value.detail == (
        "turn 3's per-call record (#3) binds to no token-bearing output item: its evidence digest matches none of "
        "them, so this call's token fields were lost (3 per-call records but 2 token-bearing output items)"
    )


@pytest.mark.parametrize("flavour", ["transport", "full", "pr2870", "osworld"])
@pytest.mark.parametrize("lost", [0, 1, 2])
def test_every_flavour_names_the_call_that_lost_its_token_fields(flavour, lost):
    resp = compacted_three_calls(flavour)
    item = _items(resp)[lost]
    for field in ("prompt_token_ids", "generation_token_ids", "generation_log_probs"):
        del item[field]
    code, _, turn = _refusal(run_result(resp))
    assert (code, turn) == ("missing_token_evidence", lost + 1)


@pytest.mark.parametrize("dropped", [0, 1, 2])
def test_a_lost_record_names_the_unbound_item_and_the_turn_its_position_implies(dropped):
    resp = compacted_three_calls()
    resp["model_call_metadata"].pop(dropped)
    assert _refusal(resp) == ("metadata_count_mismatch", "rollout-0", None)  # the turn id was in the record
    with pytest.raises(ContractError) as info:
        plan_rollout(resp)
    assert info.value.detail == (
        f"2 per-call records but 3 token-bearing output items: output[{2 * dropped + 1}] (token-bearing item "
        f"#{dropped + 1}) carries token evidence that no per-call record binds by generation_evidence_digest; by "
        f"position it would be turn {dropped + 1}, whose record is missing"
    )


def test_counts_that_no_digest_explains_name_no_turn():
    resp = compacted_three_calls()
    resp["model_call_metadata"].pop()
    for rec in resp["model_call_metadata"]:
        rec["generation_evidence_digest"] = "0" * 64
    assert _refusal(resp) == ("metadata_count_mismatch", "rollout-0", None)


def test_malformed_token_item_names_its_turn():
    resp = compacted_three_calls()
    _items(resp)[1]["prompt_token_ids"][0] = "x"
    assert _refusal(resp) == ("malformed_payload", "rollout-0", 2)
