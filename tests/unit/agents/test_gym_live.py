"""gym-check's emitter hook: our session driven by a live script emits what Gym 0.7.0's `/run` returns."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import pytest

from compactsim.agents.evidence.live import (
    emit_live_script,
    gym_input_items,
    gym_observation_item,
    gym_output_item,
    live_record,
    sampling_config,
)
from compactsim.agents.rollout.session import EvidenceViolation
from compactsim.harness.core.errors import ConfigError
from compactsim.harness.gym_check.live import (
    DEFAULT_EMITTER_HOOK,
    compare_payloads,
    image_recency_k2,
    load_hook,
    no_compaction,
    reasoning_recency,
)

#: Keys the example file documents as removed (gym-contract.md §8): Gym emits them, the file drops them.
REMOVED_FROM_EXAMPLE = ("lineage_deltas", "final_policy_decision")


def _as_documented(ours: dict[str, Any], example: dict[str, Any]) -> dict[str, Any]:
    """Ours edited the way the §8 document was: removed keys and null top-level keys dropped."""
    return {k: v for k, v in ours.items() if k not in REMOVED_FROM_EXAMPLE and not (v is None and k not in example)}


def test_emit_live_script_reproduces_the_reference_example_exactly(example_transport):
    ours = emit_live_script(reasoning_recency())
    assert _as_documented(ours, example_transport) == example_transport
    assert {k for k, v in ours.items() if k not in example_transport and v is not None} == set(REMOVED_FROM_EXAMPLE)
    assert (ours["status"], ours["incomplete_details"]) == (None, None)
    assert compare_payloads(example_transport, _as_documented(ours, example_transport)) == []


def test_emit_live_script_reference_lineage_matches_the_documented_removed_keys(example_transport):
    ours = emit_live_script(reasoning_recency())
    deltas = ours["lineage_deltas"]
    transforms = [m["policy_decision"]["transformation_id"] for m in example_transport["model_call_metadata"]]
    assert [len(d["unit_upserts"]) for d in deltas] == [1, 4, 4]
    assert [d["lossy"] for d in deltas] == [False, False, True]
    assert [d["parent_transformation_id"] for d in deltas] == [None, transforms[0], transforms[1]]
    assert ours["final_policy_decision"]["decision_turn"] == 3
    assert len(ours["final_policy_decision"]["lineage"]["unit_records"]) == 8


@pytest.mark.parametrize("form", ["model", "model_dump", "to_checker", "attributes"])
def test_emit_live_script_accepts_the_script_duck_typed(form, example_transport):
    script = reasoning_recency()
    value: Any = {
        "model": script,
        "model_dump": script.model_dump(),
        "to_checker": script.to_checker(),
        "attributes": SimpleNamespace(**{**vars(script), "calls": [SimpleNamespace(**vars(c)) for c in script.calls]}),
    }[form]
    assert _as_documented(emit_live_script(value), example_transport) == example_transport


def test_default_emitter_hook_resolves_to_emit_live_script():
    assert load_hook(DEFAULT_EMITTER_HOOK) is emit_live_script


def test_live_record_no_compaction_is_one_append_chain():
    record = live_record(no_compaction())
    assert [c.prepared.required_prefix_token_ids for c in record.calls] == [None, (1, 2, 3, 11, 12),
                                                                            (1, 2, 3, 11, 12, 4, 900, 5, 21, 22)]
    assert [c.observed.prompt_token_ids for c in record.calls][2] == (1, 2, 3, 11, 12, 4, 900, 5, 21, 22, 6, 7)
    assert record.boundary_events == ()
    assert record.stop_reason == "no_tool_call"


def test_live_record_image_recency_k2_rewrites_before_calls_4_and_5():
    record = live_record(image_recency_k2())
    assert [c.prepared.prepared.append_compatible for c in record.calls] == [False, True, True, False, False]
    assert [b.applies_to_step for b in record.boundary_events] == [4, 5]
    assert [(b.retained_media_count, b.removed_media_count) for b in record.boundary_events] == [(2, 1), (2, 1)]
    assert [c.observed.prompt_token_ids for c in record.calls][3:] == [
        (1, 2, 3, 64, 900, 5, 74), (1, 2, 3, 65, 900, 5, 75),
    ]
    assert len(record.media_assets) == 4


def test_live_record_stamps_the_run_identity_on_the_contract():
    script = image_recency_k2().model_copy(update={"group_id": "g-7", "task_id": None, "rollout_index": 3,
                                                    "attempt_index": 2})
    contract = emit_live_script(script)["context_compaction_contract"]
    assert {k: contract[k] for k in ("rollout_id", "group_id", "task_id", "rollout_index", "attempt_index")} == {
        "rollout_id": "rollout-live-images", "group_id": "g-7", "task_id": None, "rollout_index": 3, "attempt_index": 2,
    }
    assert (contract["schema_version"], contract["mode"]) == (3, "exact_trace_authority")


def test_live_record_incomplete_call_sets_finish_reason_and_details():
    data = no_compaction().model_dump()
    data["calls"][-1]["incomplete_reason"] = "max_output_tokens"
    record = live_record(data)
    assert record.calls[-1].observed.finish_reason == "max_output_tokens"
    assert record.stop_reason == "length"
    assert emit_live_script(data)["incomplete_details"] == {"reason": "max_output_tokens"}


def test_gym_output_item_spells_out_gym_nulls_and_drops_unknown_keys():
    assert gym_output_item({"id": "rs_1", "type": "reasoning", "status": "completed",
                            "summary": [{"type": "summary_text", "text": "x"}]}) == {
        "id": "rs_1", "summary": [{"type": "summary_text", "text": "x"}], "type": "reasoning",
        "encrypted_content": None, "content": None,
    }
    assert gym_output_item({"type": "function_call", "call_id": "c", "name": "n", "arguments": "{}"}) == {
        "arguments": "{}", "call_id": "c", "name": "n", "type": "function_call", "id": None, "status": None,
        "namespace": None,
    }


def test_gym_output_item_token_bearing_message_is_the_training_variant():
    item = {"id": "m", "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": "t", "annotations": []}],
            "prompt_token_ids": [1], "generation_token_ids": [2], "generation_log_probs": [-1.0]}
    shaped = gym_output_item(item)
    assert list(shaped) == ["prompt_token_ids", "generation_token_ids", "generation_log_probs", "routed_experts",
                            "id", "content", "role", "status", "type", "phase"]
    assert shaped["content"] == [{"annotations": [], "text": "t", "type": "output_text", "logprobs": None}]
    assert shaped["routed_experts"] is None
    assert gym_output_item({"type": "web_search_call", "id": "w"}) == {"type": "web_search_call", "id": "w"}


def test_gym_observation_item_types_tool_outputs_and_user_messages_only():
    assert gym_observation_item({"type": "function_call_output", "call_id": "c", "output": "ok"}) == {
        "call_id": "c", "output": "ok", "type": "function_call_output", "id": None, "status": None,
    }
    image = {"type": "input_image", "image_url": "data:image/png;base64,AA", "detail": "auto"}
    assert gym_observation_item({"type": "message", "role": "user", "content": [image]}) == {
        "content": [image], "role": "user", "type": "message", "phase": None,
    }
    other = {"type": "message", "role": "assistant", "content": "kept as is"}
    assert gym_observation_item(other) == other


def test_gym_input_items_string_becomes_one_user_message():
    assert gym_input_items("Open the settings app.") == [
        {"content": "Open the settings app.", "role": "user", "type": "message", "phase": None}
    ]
    assert gym_input_items([{"role": "system", "content": "s"}]) == [
        {"content": "s", "role": "system", "type": "message", "phase": None}
    ]


def test_sampling_config_fills_gym_request_defaults_and_drops_nulls():
    assert sampling_config({"input": "x", "temperature": 1.0, "top_p": None}) == {
        "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "temperature": 1.0,
    }


def test_gym_input_items_rejects_a_non_list_input():
    with pytest.raises(ConfigError) as exc:
        gym_input_items(7)
    assert exc.value.code == "invalid_argument"
    assert str(exc.value) == "invalid_argument: live script request.input must be a string or a list of items, got int"


def test_emit_live_script_rejects_a_script_without_request():
    data = no_compaction().model_dump()
    del data["request"]
    with pytest.raises(ConfigError) as exc:
        emit_live_script(data)
    assert exc.value.code == "invalid_argument"
    assert str(exc.value) == ("invalid_argument: live script 'no-compaction': missing 'request' "
                              "(expected a LiveScript or its model_dump())")


def test_emit_live_script_rejects_a_script_without_calls():
    data = no_compaction().model_dump()
    data["calls"] = []
    with pytest.raises(ConfigError) as exc:
        emit_live_script(data)
    assert str(exc.value) == "invalid_argument: live script 'no-compaction': calls must hold at least one model call"


def test_emit_live_script_rejects_a_call_without_output():
    data = no_compaction().model_dump()
    data["calls"][1]["output"] = []
    with pytest.raises(ConfigError) as exc:
        emit_live_script(data)
    assert str(exc.value) == ("invalid_argument: live script 'no-compaction' call 2: output must hold at least one "
                              "item (tokens go on the last)")


def test_emit_live_script_rewrite_without_rewrite_prompt_fails_loud():
    data = image_recency_k2().model_dump()
    data["calls"][3]["rewrite_prompt_token_ids"] = None
    with pytest.raises(ConfigError) as exc:
        emit_live_script(data)
    assert exc.value.code == "invalid_argument"
    assert str(exc.value) == (
        "invalid_argument: live script 'image-recency-k2' turn 4: the view is not append-compatible here, so the "
        "script must give rewrite_prompt_token_ids (a re-rendered prompt) for this call"
    )


def test_emit_live_script_forced_prompt_without_required_prefix_is_an_evidence_violation():
    data = copy.deepcopy(no_compaction().model_dump())
    data["calls"][1]["prompt_token_ids"] = [9, 9, 9]
    with pytest.raises(EvidenceViolation) as exc:
        emit_live_script(data)
    assert exc.value.rule == "required_prefix"
    assert str(exc.value) == ("Generation-observed prompt does not contain the required exact prefix: "
                              "required_count=5 prompt_count=3")
