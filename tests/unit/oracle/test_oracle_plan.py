"""The oracle's expected plan: segmentation at declared boundaries and every evidence error it predicts."""

from __future__ import annotations

import numpy as np
import pytest

from compactsim.harness.core.errors import ConfigError
from compactsim.harness.oracle.plan import MUTATION_TURNS, evidence_error, expected_plan, mutation_error, segment
from compactsim.scenarios.mutations import MUTATIONS
from tests.unit.oracle.oracle_builders import call, continuing, packed_routes, rollout


def _three_calls(**kw):
    """Calls 1-2 append, boundary at call 3 (the reference shape)."""
    c1 = call(1, [1, 2, 3], [11, 12])
    c2 = continuing(c1, 2, [4, 5], [21, 22], media=["a"])
    c3 = call(3, [1, 2, 3, 9, 21, 22, 6], [31, 32, 33], boundary=True, media=["a", "b"])
    return rollout([c1, c2, c3], **kw)


def test_declared_boundary_starts_a_new_trace_owning_the_last_prompts_media():
    plan = expected_plan(_three_calls())
    assert plan.error is None and plan.path == "physical"
    assert [[c.turn_id for c in t.calls] for t in plan.traces] == [[1, 2], [3]]
    assert [t.start_reason for t in plan.traces] == ["rollout_start", "declared_boundary"]
    assert [t.last.media_ids for t in plan.traces] == [("a",), ("a", "b")]
    assert [(t.num_tokens, t.num_sampled_tokens) for t in plan.traces] == [(9, 4), (10, 3)]


def test_no_contract_rollout_is_one_trace_when_every_call_extends():
    c1 = call(1, [1, 2], [3])
    c2 = continuing(c1, 2, [4], [5])
    plan = expected_plan(rollout([c1, c2], flavour="none"))
    assert plan.path == "single" and len(plan.traces) == 1
    assert plan.truth.rollout_id == "resp-s0-g0-r0"  # a legacy result's only identity
    # no id names a group: NeMo-RL groups identical first-turn prompts (§3.2)
    assert plan.truth.group_key.startswith("prompt-") and len(plan.truth.group_key) == len("prompt-") + 16


@pytest.mark.parametrize(
    ("calls", "flavour", "expected"),
    [
        # without a contract a break is undeclared
        (lambda: [call(1, [1, 2], [3]), call(2, [1, 9], [5])], "none", ("undeclared_discontinuity", 2)),
        # declared append that the tokens do not show
        (lambda: [call(1, [1, 2], [3]), call(2, [1, 9], [5])], "gym-0.7.0-transport", ("append_declaration_mismatch", 2)),
        # a boundary on a real continuation
        (lambda: [call(1, [1, 2], [3]), call(2, [1, 2, 3, 4], [5], boundary=True)], "gym-pr2870",
         ("boundary_without_rewrite", 2)),
        # not declared append, no boundary, yet it continues
        (lambda: [call(1, [1, 2], [3]), call(2, [1, 2, 3, 4], [5], append=False)], "gym-0.7.0-full",
         ("append_declaration_mismatch", 2)),
        # not declared, no boundary, and it breaks
        (lambda: [call(1, [1, 2], [3]), call(2, [7], [5], append=False)], "osworld", ("undeclared_discontinuity", 2)),
        # inside a trace media must extend
        (lambda: [call(1, [1, 2], [3], media=["a"]), call(2, [1, 2, 3], [5], media=["b"])], "gym-0.7.0-transport",
         ("media_continuity", 2)),
        # the first call cannot append or be a boundary
        (lambda: [call(1, [1, 2], [3], append=True)], "gym-0.7.0-transport", ("append_declaration_mismatch", 1)),
        (lambda: [call(1, [1, 2], [3], boundary=True)], "gym-0.7.0-transport", ("boundary_without_rewrite", 1)),
        # per-call evidence comes first, over every call
        (lambda: [call(1, [1, 2], [3]), call(2, [9], [5]), call(3, [9, 5], [6, 7], logprobs=[-1.0])],
         "gym-0.7.0-transport", ("token_logprob_length_mismatch", 3)),
        (lambda: [call(1, [1, 2], [3], routes=packed_routes(3, 1, extra=2))], "gym-0.7.0-transport",
         ("routed_experts_shape", 1)),
        (lambda: [call(1, [1, 2], [3], routes=packed_routes(2, 1))], "gym-0.7.0-transport", ("routed_experts_shape", 1)),
        (lambda: [call(1, [1, 2], [3], routes=packed_routes(3, 1)),
                  call(2, [1, 2, 3], [4], routes=packed_routes(4, 2, topk=3))], "gym-0.7.0-transport",
         ("routed_experts_shape", 2)),
    ],
)
def test_evidence_error_names_the_first_broken_rule_and_turn(calls, flavour, expected):
    error = evidence_error(rollout(calls(), flavour=flavour))
    assert (error.code, error.turn_id) == expected


def test_a_route_row_that_is_partly_the_sentinel_is_a_shape_error():
    routes = packed_routes(3, 1)
    routes[0, 0, 0] = -1
    assert evidence_error(rollout([call(1, [1, 2], [3], routes=routes)])).code == "routed_experts_shape"
    routes[0, 0, :] = -1  # a whole row of -1 is a legal "not recorded"
    assert evidence_error(rollout([call(1, [1, 2], [3], routes=routes)])) is None


def test_one_surplus_route_row_is_allowed():
    assert evidence_error(rollout([call(1, [1, 2], [3], routes=packed_routes(3, 1, extra=1))])) is None


def test_unknown_media_asset_is_an_error_only_with_a_contract():
    r = rollout([call(1, [1, 2], [3], media=["ghost"])], media={})
    assert (evidence_error(r).code, evidence_error(r).turn_id) == ("unknown_media_asset", 1)


def test_legacy_rollout_without_calls_has_no_token_evidence_but_a_contract_one_plans_empty():
    legacy = evidence_error(rollout([], flavour="none"))
    assert (legacy.code, legacy.turn_id) == ("missing_token_evidence", None)
    plan = expected_plan(rollout([]))
    assert plan.error is None and plan.traces == ()


def test_segment_never_splits_a_legacy_rollout():
    c1 = call(1, [1, 2], [3])
    c2 = call(2, [9], [5], boundary=True)
    assert len(segment(rollout([c1, c2], flavour="none"))) == 1
    assert len(segment(rollout([c1, c2]))) == 2


@pytest.mark.parametrize(
    ("name", "turn"),
    [
        ("spoof_append_declaration", 3), ("drop_boundary_declaration", 3), ("boundary_on_prefix_continuation", 2),
        ("ghost_media", 3), ("remove_media_asset", 2), ("corrupt_digest", 3), ("shift_prompt_token", 2),
        ("drop_logprob", 3), ("dangling_compaction_event", 3), ("drop_call_record", None),
        ("partial_token_fields", 1), ("swap_turn_ids", 2), ("foreign_rollout_id", 3), ("surplus_route_rows", 1),
        ("unknown_schema_version", None), ("reorder_trace_media", 2),
    ],
)
def test_every_mutation_predicts_its_documented_code_at_the_turn_it_edits(name, turn):
    code = next(m.code for m in MUTATIONS if m.name == name)
    error = mutation_error(_three_calls(), name)
    assert (error.code, error.rollout_id, error.turn_id) == (code, "s0-g0-r0", turn)


def test_every_documented_mutation_has_an_oracle_rule():
    assert {m.name for m in MUTATIONS} == set(MUTATION_TURNS)


@pytest.mark.parametrize(
    ("name", "truth", "message"),
    [
        ("spoof_append_declaration", lambda: rollout([call(1, [1], [2]), continuing(call(1, [1], [2]), 2, [], [3])]),
         "needs a declared boundary"),
        ("boundary_on_prefix_continuation", lambda: rollout([call(1, [1], [2]), call(2, [5], [3], boundary=True)]),
         "needs an append-compatible call"),
        ("remove_media_asset", lambda: rollout([call(1, [1], [2])]), "needs a call with an image"),
        ("swap_turn_ids", lambda: rollout([call(1, [1], [2])]), "needs two calls"),
        ("unknown_schema_version", lambda: _three_calls(flavour="gym-pr2870"), "needs a 0.7.0 contract"),
        ("ghost_media", lambda: _three_calls(flavour="none"), "flavour 'none' has none"),
        ("no_such_mutation", lambda: _three_calls(), "no rule for mutation"),
        ("ghost_media", lambda: rollout([call(1, [1], [2]), call(2, [7], [3])]), "already invalid"),
        ("ghost_media", lambda: rollout([]), "at least one call"),
    ],
)
def test_a_mutation_that_cannot_apply_is_a_config_error(name, truth, message):
    with pytest.raises(ConfigError) as info:
        mutation_error(truth(), name)
    assert info.value.code == "invalid_config"
    assert message in str(info.value)


def test_expected_plan_of_a_mutated_rollout_has_the_error_and_no_traces():
    plan = expected_plan(_three_calls(), mutation="ghost_media")
    assert plan.traces == () and plan.path is None and plan.error.code == "unknown_media_asset"


def test_routes_as_object_arrays_are_a_shape_error():
    c = call(1, [1, 2], [3], routes=np.array([[1, 2], [3]], dtype=object))
    assert evidence_error(rollout([c])).code == "routed_experts_shape"
