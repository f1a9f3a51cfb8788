"""The error vocabulary: closed codes, readable messages, picklable across processes."""

from __future__ import annotations

import pickle

import pytest

from compactsim.harness.core.errors import CONTRACT_CODES, CompactsimError, ConfigError, ContractError


def test_contract_error_message_names_code_rollout_and_turn():
    err = ContractError("turn_order", rollout_id="r1", turn_id=3, detail="expected 2")
    assert str(err) == "turn_order (rollout 'r1', turn 3): expected 2"
    assert err.to_json() == {
        "error_code": "turn_order",
        "rollout_id": "r1",
        "turn_id": 3,
        "message": "turn_order (rollout 'r1', turn 3): expected 2",
    }
    assert isinstance(err, CompactsimError)


def test_unknown_contract_code_is_a_programming_error():
    with pytest.raises(ValueError, match="unknown contract code 'nope'"):
        ContractError("nope")  # type: ignore[arg-type]


def test_errors_survive_pickling():
    err = pickle.loads(pickle.dumps(ContractError("empty_trace", rollout_id="r", turn_id=None, detail="d")))
    assert (err.code, err.rollout_id, err.turn_id, err.detail) == ("empty_trace", "r", None, "d")
    cfg = pickle.loads(pickle.dumps(ConfigError("unsupported_config", "bad", violations=("a", "b"))))
    assert cfg.violations == ("a", "b") and cfg.code == "unsupported_config"
    assert str(cfg) == "unsupported_config: bad\n  - a\n  - b"


def test_every_design_code_is_in_the_vocabulary():
    design = {
        "undeclared_discontinuity", "append_declaration_mismatch", "boundary_without_rewrite",
        "unknown_media_asset", "token_logprob_length_mismatch", "evidence_digest_mismatch",
        "orphan_compaction_event", "missing_token_evidence", "metadata_count_mismatch", "turn_order",
        "rollout_id_mismatch", "media_continuity", "routed_experts_shape", "unsupported_contract",
        "duplicate_logical_rollout_id", "duplicate_physical_trace_id", "incomplete_group",
        "no_eligible_tokens", "mixed_policy_versions", "empty_trace", "inconsistent_routed_expert_shapes",
    }
    assert design <= set(CONTRACT_CODES)
