"""Core helpers answer hostile values with typed errors: digests, contract bounds, the code vocabulary."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from compactsim.harness.core.contract import FLOAT_EXACT_INT, INT32_LIMIT, MediaAssetModel, RunResult, TokenFields
from compactsim.harness.core.digests import MAX_DIGEST_DEPTH, canonical_digest, generation_evidence_digest, nesting_depth
from compactsim.harness.core.errors import CONTRACT_CODES, ContractError

NEW_CODES = {
    "logprob_out_of_range",
    "routed_expert_id_out_of_range",
    "media_digest_mismatch",
    "media_asset_key_mismatch",
    "media_dimensions_mismatch",
}


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def test_issue_15_codes_are_in_the_closed_vocabulary_with_a_cause():
    assert NEW_CODES <= set(CONTRACT_CODES)
    assert all(CONTRACT_CODES[c] for c in NEW_CODES)
    assert len(set(CONTRACT_CODES.values())) == len(CONTRACT_CODES)  # one meaning per code


@pytest.mark.parametrize(("depth", "expected"), [(0, 0), (1, 1), (5, 5), (MAX_DIGEST_DEPTH, MAX_DIGEST_DEPTH)])
def test_nesting_depth_counts_containers(depth, expected):
    assert nesting_depth(_nested(depth)) == expected


def test_nesting_depth_stops_just_past_the_limit_on_a_huge_value():
    assert nesting_depth(_nested(100_000)) == MAX_DIGEST_DEPTH + 1
    assert nesting_depth({"a": [1, {"b": 2}], "c": "x"}) == 3


def test_digest_of_a_too_deep_value_is_malformed_payload_not_recursion_error():
    with pytest.raises(ContractError) as info:
        canonical_digest(_nested(100_000))
    assert info.value.code == "malformed_payload"
    assert info.value.detail == "a digested value nests too deeply to encode"


def test_evidence_digest_of_a_huge_integer_logprob_is_malformed_payload_not_overflow():
    with pytest.raises(ContractError) as info:
        generation_evidence_digest([1], [2, 3], [-0.5, 10**400])
    assert (info.value.code, info.value.detail) == (
        "malformed_payload", "sampled_logprobs[1] is an integer too large for a float"
    )


def test_evidence_digest_hashes_integer_logprobs_as_floats_like_gym():
    assert generation_evidence_digest([1], [2], [-1]) == generation_evidence_digest([1], [2], [-1.0])


@pytest.mark.parametrize("value", [2 * FLOAT_EXACT_INT, -(10**400), 10**20])
def test_reward_integers_beyond_float_exactness_are_refused(value):
    with pytest.raises(ValidationError):
        RunResult.model_validate({"response": {"output": []}, "reward": value})


def test_reward_at_the_bound_is_accepted():
    assert RunResult.model_validate({"response": {"output": []}, "reward": FLOAT_EXACT_INT}).reward == FLOAT_EXACT_INT


@pytest.mark.parametrize("dims", [[0, 1], [1], [1, 2, 3], [INT32_LIMIT, 1], [-1, 1]])
def test_original_dimensions_are_two_positive_int32s(dims):
    with pytest.raises(ValidationError):
        MediaAssetModel.model_validate({"media_id": "m", "source_part": {}, "original_dimensions": dims})


def test_policy_version_is_a_non_negative_int32():
    base = {"prompt_token_ids": [1], "generation_token_ids": [2], "generation_log_probs": [-0.5]}
    assert TokenFields.model_validate({**base, "policy_version": INT32_LIMIT - 1}).policy_version == INT32_LIMIT - 1
    for bad in (-1, INT32_LIMIT, 10**100):
        with pytest.raises(ValidationError):
            TokenFields.model_validate({**base, "policy_version": bad})
