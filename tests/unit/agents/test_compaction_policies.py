"""Each policy and schedule creates boundaries exactly where its view stops extending the last one."""

from __future__ import annotations

import pytest

from compactsim.agents.compaction.config import ContextHistoryConfig
from compactsim.agents.compaction.presets import PRESETS, policy_preset
from compactsim.agents.rollout.script import ImageSpec, RolloutScript, scripted_turns
from compactsim.harness.core import chat_template as ct
from compactsim.harness.core.digests import canonical_digest


def _script(turns: int = 6, **kwargs) -> RolloutScript:
    return RolloutScript(turns=scripted_turns(0, turns=turns, **kwargs))


def _boundary_turns(session) -> list[int]:
    return [b.applies_to_step for b in session.boundary_events]


def _history(policy: dict, schedule: dict | None = None) -> ContextHistoryConfig:
    return ContextHistoryConfig.model_validate({"policy": policy, **({"schedule": schedule} if schedule else {})})


@pytest.mark.parametrize(
    ("preset", "boundaries"),
    [
        ("identity", []),
        ("recency-images-k1", [3, 4, 5, 6]),
        ("recency-images-k2", [4, 5, 6]),
        ("recency-images-k3", [5, 6]),
        ("recency-images-k2-chunked3", [4]),
        ("recency-images-k2-nomarker", [4, 5, 6]),
        ("recency-reasoning-last1", [3, 4, 5, 6]),
        ("recency-images-k2-reasoning-last1", [3, 4, 5, 6]),
        ("summary", [3]),
        ("summary-at3-at5", [3, 5]),
        ("tool-output-truncation", [3, 4, 5, 6]),
        ("think-strip", [3, 4, 5, 6]),
    ],
)
def test_preset_boundaries_fall_on_expected_turns(drive, preset, boundaries):
    session = drive(policy_preset(preset), _script())
    assert _boundary_turns(session) == boundaries
    assert [o.compaction_event_id is not None for o in session.completion_evidence] == [
        t in boundaries for t in range(1, 7)
    ]


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_declares_append_exactly_when_tokens_extend(drive, preset):
    session = drive(policy_preset(preset), _script())
    evidence = session.completion_evidence
    assert evidence[0].expected_append_compatible is False
    for prev, cur in zip(evidence, evidence[1:]):
        context = prev.prompt_token_ids + prev.sampled_token_ids
        tokens_extend = cur.prompt_token_ids[: len(context)] == context
        media_extend = cur.media_ids[: len(prev.media_ids)] == prev.media_ids
        assert cur.expected_append_compatible == (tokens_extend and media_extend)
        assert (cur.compaction_event_id is None) == cur.expected_append_compatible
        assert cur.context_epoch == cur.segment_index == sum(
            1 for e in evidence[1 : cur.turn_id] if not e.expected_append_compatible
        )


def test_identity_rollout_is_one_append_compatible_sequence(drive):
    session = drive(policy_preset("identity"), _script())
    evidence = session.completion_evidence
    assert [e.expected_append_compatible for e in evidence] == [False, True, True, True, True, True]
    assert len({e.segment_id for e in evidence}) == 1
    for prev, cur in zip(evidence, evidence[1:]):
        assert cur.prompt_token_ids[: len(prev.prompt_token_ids) + len(prev.sampled_token_ids)] == (
            prev.prompt_token_ids + prev.sampled_token_ids
        )


def test_recency_k2_keeps_last_two_groups_and_marks_the_omitted_run(drive):
    session = drive(policy_preset("recency-images-k2"), _script())
    evidence = session.completion_evidence
    assert [len(e.media_ids) for e in evidence] == [0, 1, 2, 2, 2, 2]
    assert evidence[3].media_ids == evidence[2].media_ids[1:] + (evidence[3].media_ids[-1],)
    events = session.boundary_events
    assert [(b.retained_media_count, b.removed_media_count) for b in events] == [(2, 1), (2, 1), (2, 1)]
    digest = canonical_digest({"type": "recency", "config": session.config.policy.config.model_dump(mode="json")})
    assert events[0].inserted_artifact_ids == (f"omission-{digest[:12]}-part-000004-000",)
    assert events[0].changed_part_ranges == (("part-000004-000", "part-000004-000"),)
    # one marker for the run of omitted groups, anchored at the first omitted image
    assert events[1].changed_part_ranges == (("part-000004-000", "part-000004-000"), ("part-000008-000", "part-000008-000"))
    assert events[1].inserted_artifact_ids == events[0].inserted_artifact_ids


def test_recency_marker_replaces_image_part_in_the_request(drive, answer):
    session = drive(policy_preset("recency-images-k1"), _script(turns=3))
    call = session.prepare_call(4)  # view after the rollout: the marker sits where group 1's image was
    message = next(it for it in call.request_input if it.get("role") == "user" and isinstance(it.get("content"), list))
    assert message["content"][0] == {"type": "input_text", "text": "[Earlier image omitted]"}
    assert message["content"][1] == {"type": "input_text", "text": "screen after step 1"}


def test_recency_without_marker_drops_parts_with_dropped_lineage(drive):
    session = drive(policy_preset("recency-images-k2-nomarker"), _script())
    assert all(b.inserted_artifact_ids == () for b in session.boundary_events)
    units = {u.source_unit_id: u for u in session.final_policy_decision.lineage.unit_records}
    assert units["part-000004-000"].disposition == "dropped"
    assert units["part-000004-000"].output_unit_ids == ()


def test_recency_k0_keeps_only_the_pending_group(drive):
    history = _history({"type": "recency", "config": {"images": {"enabled": True, "keep_last_groups": 0}}})
    session = drive(history, _script())
    media = [e.media_ids for e in session.completion_evidence]
    assert [len(m) for m in media] == [0, 1, 1, 1, 1, 1]
    assert len(set(media[1:])) == 5  # a different (the newest) image each time
    assert _boundary_turns(session) == [3, 4, 5, 6]


def test_recency_protects_initial_context_images_unless_disabled(drive):
    script = RolloutScript(task_images=(ImageSpec(key="task-screen"),), turns=scripted_turns(0, turns=4))
    protected = drive(_history({"type": "recency", "config": {"images": {"enabled": True, "keep_last_groups": 1}}}), script)
    task_media = protected.completion_evidence[0].media_ids
    assert len(task_media) == 1
    assert all(e.media_ids[0] == task_media[0] for e in protected.completion_evidence)
    assert _boundary_turns(protected) == [3, 4]
    exposed = drive(_history({"type": "recency", "config": {"images": {
        "enabled": True, "keep_last_groups": 1, "protect_initial_context": False}}}), script)
    assert exposed.completion_evidence[1].media_ids[0] != task_media[0]
    assert _boundary_turns(exposed) == [2, 3, 4]


def test_reasoning_keep_first_block_delays_the_first_boundary(drive):
    history = _history({"type": "recency", "config": {"reasoning": {
        "enabled": True, "keep_first_block": True, "keep_last_blocks": 1}}})
    session = drive(history, _script())
    assert _boundary_turns(session) == [4, 5, 6]
    kept = [u.source_unit_id for u in session.final_policy_decision.lineage.unit_records
            if u.disposition == "kept" and u.source_unit_id.endswith("-000")]
    assert "part-000001-000" in kept  # the first reasoning block (event 1) survives


def test_reasoning_keep_zero_declares_append_although_tokens_diverge(drive, answer):
    """Gym's rule compares the previous *view*; dropping the newest call's own reasoning slips through."""
    history = _history({"type": "recency", "config": {"reasoning": {"enabled": True, "keep_last_blocks": 0}}})
    session = drive(history, _script(turns=1))
    first = session.completion_evidence[0]
    call = session.prepare_call(2)
    assert call.prepared.append_compatible is True
    assert call.required_prefix_token_ids == first.prompt_token_ids + first.sampled_token_ids
    rendered = ct.render_prompt(list(call.request_input)).token_ids
    assert rendered[: len(call.required_prefix_token_ids)] != call.required_prefix_token_ids


def test_turn_chunked_schedule_closes_chunks_and_stamps_boundaries(drive):
    session = drive(policy_preset("recency-images-k2-chunked3"), _script(turns=5))
    chunks = session.controller.chunk_records
    assert [(c.block_index, c.first_action_turn, c.last_action_turn, c.actual_action_count, c.early_close_reason)
            for c in chunks] == [(0, 1, 3, 3, None), (1, 4, 5, 2, "terminal")]
    assert [c.active_raw_image_count for c in chunks] == [2, 3]  # chunk 1's tail adds turn 4's image
    assert chunks[0].eligible_action_ids == ("action-000001", "action-000002", "action-000003")
    (boundary,) = session.boundary_events
    schedule_digest = canonical_digest({"schedule": "turn_chunked_recency", "version": "1", "actions_per_chunk": 3})
    assert (boundary.schedule_name, boundary.schedule_version) == ("turn_chunked_recency", "1")
    assert boundary.schedule_config_digest == schedule_digest
    assert (boundary.chunk_id, boundary.block_index) == (chunks[1].chunk_id, 1)
    rollout_digest = canonical_digest({"rollout_id": "rollout-test", "block_index": 1, "schedule_config_digest": schedule_digest})
    assert chunks[1].chunk_id == f"chunk-000001-{rollout_digest[:12]}"


def test_turn_chunked_views_keep_dropped_images_until_the_chunk_ends(drive):
    session = drive(policy_preset("recency-images-k1-chunked3"), _script())
    assert [len(e.media_ids) for e in session.completion_evidence] == [0, 1, 2, 1, 2, 3]
    assert _boundary_turns(session) == [4]


def test_summary_replaces_older_turns_with_scripted_text(drive):
    session = drive(policy_preset("summary-at3-at5"), _script())
    call = session.prepare_call(7)
    summaries = [it for it in call.request_input if str(it.get("content")).startswith("[Summary")]
    assert summaries == [{"type": "message", "role": "user", "content": "[Summary of turns 1-3]"}]
    units = {u.source_unit_id: u.disposition for u in session.final_policy_decision.lineage.unit_records}
    assert units["part-000001-000"] == "summarized"  # turn 1 reasoning
    assert units["part-000013-000"] == "kept"  # turn 4 reasoning
    first, second = session.boundary_events
    assert first.inserted_artifact_ids[0].endswith("-part-000001-000-part-000004-001")
    assert second.omitted_part_count == 15  # 3 turns x (reasoning, call, output, image, caption)


def test_tool_output_truncation_cuts_older_outputs_only(drive):
    session = drive(policy_preset("tool-output-truncation"), _script(turns=4))
    call = session.prepare_call(5)
    outputs = [it["output"] for it in call.request_input if it.get("type") == "function_call_output"]
    assert outputs[:2] == ["screenshot #1 do...[truncated]", "click #2 done at...[truncated]"]
    assert not outputs[2].endswith("[truncated]")
    units = {u.source_unit_id: u.disposition for u in session.final_policy_decision.lineage.unit_records}
    assert units["part-000003-000"] == "transformed"


def test_think_strip_keeps_only_the_latest_reasoning_block(drive):
    session = drive(policy_preset("think-strip"), _script())
    call = session.prepare_call(7)
    reasoning = [it for it in call.request_input if it.get("type") == "reasoning"]
    assert [r["summary"][0]["text"] for r in reasoning] == ["The task is complete."]
