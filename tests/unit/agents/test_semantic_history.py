"""The semantic history numbers events and parts like Gym and factors images into the media arena."""

from __future__ import annotations

import pytest

from compactsim.agents.compaction.history import SemanticHistory, semantic_part_digest, view_digest
from compactsim.agents.items import function_call_output, input_image, input_text, strip_completion_evidence, user_message
from compactsim.harness.core.digests import canonical_digest

PNG_1X1 = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"


def test_events_and_parts_are_numbered_in_append_order():
    h = SemanticHistory("r")
    h.append_items("do it", turn_id=0, is_initial_context=True)
    h.append_items([user_message([input_image(PNG_1X1), input_text("caption")])], turn_id=1)
    h.append_items([function_call_output("c1", "ok")], turn_id=1)
    parts = [(e.event_id, p.part_id, p.kind) for e, p in h.parts]
    assert parts == [
        ("event-000000", "part-000000-000", "user_text"),
        ("event-000001", "part-000001-000", "image"),
        ("event-000001", "part-000001-001", "environment_text"),
        ("event-000002", "part-000002-000", "environment_text"),
    ]


def test_image_part_is_stored_as_a_media_reference():
    h = SemanticHistory("r")
    (event,) = h.append_items([user_message([input_image(PNG_1X1)])], turn_id=1)
    media_id = event.parts[0].media_id
    assert media_id == "media-e5214ee50da1954c70348ac5"  # the §8 example's id for this exact part
    assert event.item["content"] == [{"type": "input_image", "_nemo_gym_media_id": media_id}]
    assert event.parts[0].observation_group_id == "observation-000000"
    asset = h.media_arena.export()[media_id]
    assert asset["original_dimensions"] == [1, 1]
    assert (asset["color_mode"], asset["source_format"]) == ("RGB", "png")


def test_private_ids_override_generated_ones():
    h = SemanticHistory("r")
    item = {**user_message([{**input_image(PNG_1X1), "_nemo_gym_part_id": "img-a"}]),
            "_nemo_gym_event_id": "obs-a", "_nemo_gym_observation_group_id": "group-a"}
    (event,) = h.append_items([item], turn_id=1)
    assert (event.event_id, event.parts[0].part_id, event.parts[0].observation_group_id) == ("obs-a", "img-a", "group-a")


def test_duplicate_event_id_is_rejected():
    h = SemanticHistory("r")
    h.append_items([{**user_message("a"), "_nemo_gym_event_id": "e"}], turn_id=0)
    with pytest.raises(ValueError, match="Duplicate semantic event ID 'e'"):
        h.append_items([{**user_message("b"), "_nemo_gym_event_id": "e"}], turn_id=1)


def test_unregistered_part_kind_is_rejected():
    h = SemanticHistory("r")
    with pytest.raises(ValueError, match="Unregistered semantic part kind 'hologram'"):
        h.append_items([{**user_message("a"), "_nemo_gym_semantic_kind": "hologram"}], turn_id=0)


def test_empty_rollout_id_is_rejected():
    with pytest.raises(ValueError, match="rollout_id must be non-empty"):
        SemanticHistory("")


def test_strip_completion_evidence_drops_tokens_private_ids_and_part_logprobs():
    item = {"type": "message", "role": "assistant", "prompt_token_ids": [1], "generation_token_ids": [2],
            "generation_log_probs": [-1.0], "routed_experts": None, "policy_version": 3, "_nemo_gym_event_id": "x",
            "content": [{"type": "output_text", "text": "hi", "logprobs": [], "_nemo_gym_part_id": "p"}]}
    assert strip_completion_evidence(item) == {"type": "message", "role": "assistant",
                                               "content": [{"type": "output_text", "text": "hi"}]}


def test_part_and_view_digests_follow_gyms_formulas():
    h = SemanticHistory("r")
    (event,) = h.append_items("task", turn_id=0, is_initial_context=True)
    part = event.parts[0]
    assert semantic_part_digest(event, part) == canonical_digest(
        {"kind": "user_text", "payload": {"role": "user", "type": "message", "content": "task"},
         "media_id": None, "observation_group_id": None})
    items = [{"role": "user", "type": "message", "content": "task"}]
    assert view_digest(items, ["part:part-000000-000"], []) == canonical_digest(
        {"items_digest": canonical_digest(items), "descriptor": ["part:part-000000-000"], "media_ids": []})
