"""The live check's parts that need no Gym: the wire table, the wire→ground-truth adapter, the trainer's label."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compactsim.harness.core.errors import ConfigError
from compactsim.harness.gym_check.gym_truth import gym_ground_truth
from compactsim.harness.gym_check.live_gym import diff_category, live_scenarios, run_body, tool_outputs
from compactsim.harness.gym_check.wire import wire_summary
from compactsim.harness.oracle.truth import read_truth
from compactsim.harness.pipeline.ingest import TRAINER_POLICY_VERSION, normalize_result
from compactsim.scenarios.build import step_specs
from compactsim.scenarios.catalogue import default_catalogue

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gym-0.7.0-transport-compacted-3call.json"


def _chat(rid: str, prompt: list[int], sampled: list[int], *, status: int = 200, prefix: list[int] | None = None,
          text: str = "", finish: str = "stop", drop: str | None = None) -> dict:
    request = {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "go"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "auto"}}]}],
        "metadata": {"compactsim_rollout_id": rid}, "required_prefix_token_ids": prefix}
    response = {"id": f"chat-{len(prompt)}", "prompt_token_ids": prompt, "policy_version": 3, "choices": [{
        "token_ids": sampled, "finish_reason": finish, "message": {"content": text, "tool_calls": []},
        "logprobs": {"content": [{"token": f"token_id:{t}", "logprob": -0.5} for t in sampled]}}]}
    if drop is not None:
        response.pop(drop)
    return {"path": "/v1/chat/completions", "request": request, "status": status,
            "response": response if status == 200 else {"detail": "injected fault: http_503"}}


def test_wire_summary_names_what_was_sent_and_what_the_revision_needs_but_was_not_served() -> None:
    ok = wire_summary([_chat("r0", [1, 2], [3]), _chat("r0", [1, 2, 3, 4], [5], status=503)])
    (chat,) = ok["endpoints"]
    assert (chat["calls"], chat["statuses"], chat["missing_required"]) == (2, {"200": 1, "503": 1}, [])
    assert chat["request_fields"] == ["messages", "metadata", "model", "required_prefix_token_ids"]
    assert chat["calls_without_required_prefix"] == 2
    bad = wire_summary([_chat("r0", [1, 2], [3], drop="prompt_token_ids")])
    assert bad["endpoints"][0]["missing_required"] == ["prompt_token_ids"]


def test_ground_truth_from_the_wire_log_reads_back_through_the_oracle() -> None:
    spec = step_specs(default_catalogue().get("live-transient-503"), 0)[0]
    wire = [_chat(spec.rollout_id, [1, 2], [3, 4]), _chat(spec.rollout_id, [1, 2, 3, 4, 9], [5], status=503),
            _chat(spec.rollout_id, [1, 2, 3, 4, 9], [5], prefix=[1, 2, 3, 4]), _chat("other", [7], [8]),
            _chat(spec.rollout_id, [1, 2, 3, 4, 9, 5, 6], [7], text="Settings is open.", finish="length")]
    result = {"reward": 1.0, "response": {"model_call_metadata": [
        {"turn_id": 1, "expected_append_compatible": False, "compaction_event_id": None},
        {"turn_id": 2, "expected_append_compatible": True, "compaction_event_id": None},
        {"turn_id": 3, "expected_append_compatible": False, "compaction_event_id": "boundary-000003-x"}]}}
    truth = read_truth(gym_ground_truth(spec, wire, result))
    assert [(c.turn_id, c.prompt, c.sampled, c.declared_append, c.compaction_event_id, c.finish_reason)
            for c in truth.calls] == [
        (1, (1, 2), (3, 4), False, None, None),
        (2, (1, 2, 3, 4, 9), (5,), True, None, None),
        (3, (1, 2, 3, 4, 9, 5, 6), (7,), False, "boundary-000003-x", "max_output_tokens")]
    assert [len(c.media_ids) for c in truth.calls] == [1, 1, 1]
    assert truth.final_answer == "Settings is open."
    assert truth.calls[0].policy_version == 3


def test_the_trainers_label_fills_policy_versions_gym_does_not_send() -> None:
    response = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    bare = normalize_result({"response": response, "reward": 1.0})
    labelled = normalize_result({"response": response, "reward": 1.0, TRAINER_POLICY_VERSION: 4})
    assert [c.policy_version for c in bare.calls] == [None, None, None]
    assert [c.policy_version for c in labelled.calls] == [4, 4, 4]


def test_live_scenarios_are_the_catalogues_live_tag_and_runnable_by_gyms_agent() -> None:
    names = [s.name for s in live_scenarios()]
    assert names == ["live-image-recency-rolling", "live-image-recency-chunked", "live-reasoning-stripping",
                     "live-several-tool-calls", "live-transient-503", "live-length-finish"]
    specs = step_specs(default_catalogue().get("live-several-tool-calls"), 0)
    assert tool_outputs(specs)[specs[0].rollout_id] == ["clicked", "typed", "scrolled", "shot"]
    body = run_body(specs[0])
    assert body["responses_create_params"]["metadata"] == {"compactsim_rollout_id": specs[0].rollout_id}
    with pytest.raises(ConfigError, match="text tool outputs only"):
        tool_outputs(step_specs(default_catalogue().get("no-compaction"), 0))
    with pytest.raises(ConfigError, match="not a live scenario"):
        live_scenarios(["no-compaction"])
    assert diff_category("output[3].content[0].text") == "output[].content[]"
