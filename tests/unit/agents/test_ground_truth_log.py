"""The ground-truth log says what was sent and received and where/why it compacted; rows derive from it alone."""

from __future__ import annotations

import json

from compactsim.agents.rollout.ground_truth import FORMAT, VERSION, ground_truth_log
from compactsim.agents.media.arena import media_id_for
from compactsim.harness.core import tokenizer as tok


def test_log_has_the_documented_top_level_shape(run_agent, spec_for):
    log = ground_truth_log(run_agent(spec_for(turns=3)), reward=1.0, mask_sample=True)
    assert (log["format"], log["version"]) == (FORMAT, VERSION) == ("compactsim.ground_truth", 1)
    assert list(log) == ["format", "version", "rollout", "outcome", "media", "calls", "expected"]
    assert log["outcome"] == {"status": "completed", "stop_reason": "no_tool_call", "failure": None, "num_calls": 3,
                              "reward": 1.0, "mask_sample": True}
    assert list(log["calls"][0]) == ["turn_id", "attempts", "ids", "sent", "received", "compaction", "continuity",
                                     "observations"]
    json.dumps(log, allow_nan=False)


def test_images_are_referenced_by_media_id_and_stored_once(run_agent, spec_for):
    log = ground_truth_log(run_agent(spec_for(turns=3)))
    media = log["media"]
    assert len(media) == 2
    for media_id, entry in media.items():
        assert media_id_for({"type": "input_image", "image_url": entry["data_url"], "detail": "auto"}) == media_id
        assert (entry["width"], entry["height"], entry["spec"]["kind"]) == (32, 24, "screen")
    assert [m["first_shown_turn"] for m in media.values()] == [1, 2]
    sent = log["calls"][2]["sent"]["input"]
    refs = [p for it in sent if isinstance(it.get("content"), list) for p in it["content"] if p["type"] == "input_image"]
    assert [r["media_id"] for r in refs] == log["calls"][2]["sent"]["media_ids"] == list(media)


def test_boundary_entry_explains_what_changed(run_agent, spec_for):
    log = ground_truth_log(run_agent(spec_for("recency-images-k2", turns=4)))
    assert [c["compaction"]["boundary"] is not None for c in log["calls"]] == [False, False, False, True]
    boundary = log["calls"][3]["compaction"]["boundary"]
    assert boundary["why"] == ["descriptor_not_prefix", "media_not_prefix"]
    assert boundary["dropped_from_previous_view"] == ["part:part-000004-000"]
    assert len(boundary["new_artifacts"]) == 1 and boundary["new_artifacts"][0].startswith("artifact:omission-")
    assert boundary["removed_media_ids"] == [log["calls"][1]["sent"]["media_ids"][0]]
    assert log["calls"][3]["compaction"]["decision"]["omitted_part_count"] == 1
    assert log["expected"]["declaration_violations"] == []


def test_honest_compacted_run_segments_agree_by_declaration_and_by_tokens(run_agent, spec_for):
    log = ground_truth_log(run_agent(spec_for("summary-at3-at5", turns=6)))
    declared = [s["turn_ids"] for s in log["expected"]["segments_declared"]]
    assert declared == [s["turn_ids"] for s in log["expected"]["segments_by_tokens"]] == [[1, 2], [3, 4], [5, 6]]
    assert log["expected"]["single_trace_ok"] is False
    assert log["expected"]["first_discontinuity"]["turn_id"] == 3


def test_rows_are_derivable_from_the_log_alone(run_agent, spec_for):
    log = ground_truth_log(run_agent(spec_for("recency-images-k2", turns=6)))
    calls = {c["turn_id"]: c["received"] for c in log["calls"]}
    for segment in log["expected"]["segments_declared"]:
        last = calls[segment["turn_ids"][-1]]
        row = last["prompt_token_ids"] + last["generation_token_ids"]
        assert len(row) == segment["num_tokens"]
        trainable = 0
        for turn in segment["turn_ids"]:
            got = calls[turn]
            start = len(got["prompt_token_ids"])
            assert row[: start + len(got["generation_token_ids"])] == got["prompt_token_ids"] + got["generation_token_ids"]
            trainable += len(got["generation_token_ids"])
        assert trainable == segment["num_sampled_tokens"]
        images = row.count(tok.IMAGE) // tok.IMAGE_PATCH_TOKENS
        assert images == len(segment["media_ids"])  # a new trace's prompt carries all its retained images


def test_merge_drift_without_contract_is_recorded_as_a_token_discontinuity(run_agent, spec_for):
    log = ground_truth_log(run_agent(spec_for("identity", turns=3, flavour="none"), drift="merge"))
    continuity = [c["continuity"] for c in log["calls"]]
    first = log["calls"][0]["received"]
    context = len(first["prompt_token_ids"]) + len(first["generation_token_ids"])
    assert continuity[1] == {"tokens_extend_previous": False, "media_extend_previous": True,
                             "previous_context_length": context, "mismatch_offset": context - 1}
    assert log["expected"]["single_trace_ok"] is False
    assert log["expected"]["first_discontinuity"] == {"turn_id": 2, "previous_context_length": context,
                                                      "mismatch_offset": context - 1, "media_extend_previous": True}
    assert [s["turn_ids"] for s in log["expected"]["segments_declared"]] == [[1, 2, 3]]
    assert [s["turn_ids"] for s in log["expected"]["segments_by_tokens"]] == [[1], [2], [3]]
    assert log["expected"]["declaration_violations"] == [{"turn_id": 2, "code": "append_declaration_mismatch"},
                                                        {"turn_id": 3, "code": "append_declaration_mismatch"}]


def test_failed_rollout_log_keeps_the_answered_calls_and_the_attempts(run_agent, spec_for):
    record = run_agent(spec_for(turns=4), faults=[{"kind": "http_503", "turn": 3}])
    log = ground_truth_log(record)
    assert log["outcome"]["status"] == "failed"
    failure = log["outcome"]["failure"]
    assert (failure["kind"], failure["turn_id"], failure["attempts"]) == ("server_unavailable", 3, 3)
    assert [a["outcome"] for a in failure["attempt_log"]] == ["server_unavailable"] * 3
    assert [c["turn_id"] for c in log["calls"]] == [1, 2]


def test_same_seed_gives_byte_identical_logs(run_agent, spec_for):
    a = json.dumps(ground_truth_log(run_agent(spec_for(seed=5))), sort_keys=True)
    b = json.dumps(ground_truth_log(run_agent(spec_for(seed=5))), sort_keys=True)
    c = json.dumps(ground_truth_log(run_agent(spec_for(seed=6))), sort_keys=True)
    assert a == b
    assert a != c


def test_logs_validate_against_the_published_schema(run_agent, spec_for):
    import jsonschema

    from compactsim.agents.rollout.ground_truth import GROUND_TRUTH_SCHEMA

    jsonschema.Draft202012Validator.check_schema(GROUND_TRUTH_SCHEMA)
    for record in (run_agent(spec_for("summary-at3", turns=4)),
                   run_agent(spec_for(turns=4), faults=[{"kind": "http_503", "turn": 2}])):
        jsonschema.validate(ground_truth_log(record, reward=0.5), GROUND_TRUTH_SCHEMA)
