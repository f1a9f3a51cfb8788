"""The agent loop stops where Gym's does and ends every fault as success or a classified failure."""

from __future__ import annotations

import httpx
import pytest

from compactsim.agents.rollout.loop import RetryPolicy, ScriptedAgent, post_json
from compactsim.agents.rollout.script import RolloutScript, ToolCallSpec, TurnScript


def test_rollout_stops_after_the_turn_without_a_tool_call(run_agent, spec_for):
    record = run_agent(spec_for("identity", turns=5))
    assert (record.stop_reason, len(record.calls), record.failure) == ("no_tool_call", 5, None)
    assert record.calls[-1].observations == ()
    assert [len(c.observations) for c in record.calls[:-1]] == [2, 2, 2, 2]  # tool output + image message


def test_rollout_stops_at_max_steps(run_agent, spec_for):
    spec = spec_for("identity", turns=6).model_copy(update={"max_steps": 3})
    record = run_agent(spec)
    assert (record.stop_reason, len(record.calls)) == ("max_steps", 3)
    assert len(record.calls[-1].observations) == 2  # the last step's tool still ran, as in Gym


def test_rollout_stops_when_generation_hits_its_token_budget(run_agent, spec_for):
    spec = spec_for("identity", turns=4)
    turns = list(spec.script.turns)
    turns[1] = turns[1].model_copy(update={"finish_reason": "length"})
    record = run_agent(spec.model_copy(update={"script": RolloutScript(turns=tuple(turns))}))
    assert (record.stop_reason, len(record.calls)) == ("length", 2)
    assert record.calls[-1].observed.finish_reason == "max_output_tokens"
    assert record.calls[-1].observations == ()


def test_unscripted_tool_call_gets_the_default_result(run_agent, spec_for):
    script = RolloutScript(turns=(TurnScript(tool_calls=(ToolCallSpec(name="noop"),)), TurnScript(text="done")))
    record = run_agent(spec_for("identity").model_copy(update={"script": script}))
    assert [o["output"] for o in record.calls[0].observations] == ["ok"]


@pytest.mark.parametrize(
    ("kind", "failure", "attempts"),
    [
        ("http_500", "server_unavailable", 3),
        ("http_503", "server_unavailable", 3),
        ("truncated_json", "malformed_response", 3),
        ("drop_connection", "malformed_response", 3),  # in-process the cut body arrives as bad JSON
        ("missing_logprobs", "evidence_violation", 1),
        ("logprob_length_mismatch", "evidence_violation", 1),
    ],
)
def test_persistent_fault_ends_in_a_classified_failure_within_the_budget(run_agent, spec_for, kind, failure, attempts):
    record = run_agent(spec_for(turns=4), faults=[{"kind": kind, "turn": 2}])
    assert record.failure is not None
    assert (record.failure.kind, record.failure.turn_id, record.failure.attempts) == (failure, 2, attempts)
    assert len(record.failure.attempt_log) == attempts
    assert len(record.calls) == 1


@pytest.mark.parametrize("kind", ["surplus_route_rows", "missing_route_rows", "slow"])
def test_faults_gym_does_not_check_pass_through_to_the_evidence(run_agent, spec_for, kind):
    record = run_agent(spec_for(turns=3), faults=[{"kind": kind, "turn": 2, "delay_s": 0.0}])
    assert (record.failure, record.stop_reason, len(record.calls)) == (None, "no_tool_call", 3)


def test_route_row_faults_change_the_recorded_routes(run_agent, spec_for):
    record = run_agent(spec_for(turns=3), faults=[{"kind": "surplus_route_rows", "turn": 2}])
    call = record.calls[1]
    rows = len(call.token_item["routed_experts"])
    assert rows == len(call.observed.prompt_token_ids) + len(call.observed.sampled_token_ids) + 2


def test_rejected_request_is_not_retried(run_agent, spec_for):
    record = run_agent(spec_for(turns=3), limits={"max_images": 0})
    assert (record.failure.kind, record.failure.turn_id, record.failure.attempts) == ("rejected_request", 2, 1)
    assert "the prompt has 1 images; the limit is 0" in record.failure.detail


def test_server_prefix_rejection_is_an_evidence_violation(run_agent, spec_for):
    record = run_agent(spec_for("recency-images-k2", turns=3, flavour="gym-0.7.0-transport"), drift="merge")
    assert (record.failure.kind, record.failure.turn_id) == ("evidence_violation", 2)
    assert "required_prefix_token_ids is not a prefix" in record.failure.detail


def test_plain_agent_sends_no_prefix_and_records_drifted_prompts(run_agent, spec_for):
    record = run_agent(spec_for("identity", turns=3, flavour="none"), drift="merge")
    assert record.failure is None
    assert all("required_prefix_token_ids" not in c.request for c in record.calls)


def _flaky_client(inner: httpx.Client, failures: int, status: int = 503) -> tuple[httpx.Client, list[dict]]:
    """A client whose first `failures` requests get `status`; later ones reach `inner`."""
    seen: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        import json

        seen.append(json.loads(request.content))
        if len(seen) <= failures:
            return httpx.Response(status, json={"detail": "flaky"})
        forwarded = inner.post(request.url.path, content=request.content, headers={"content-type": "application/json"})
        return httpx.Response(forwarded.status_code, content=forwarded.content, headers=forwarded.headers)

    return httpx.Client(transport=httpx.MockTransport(handler), base_url="http://test"), seen


def test_transient_failures_are_retried_with_the_identical_body(mock_model, spec_for):
    """As Gym's client does: the server tells the attempts apart by counting identical bodies."""
    spec = spec_for("identity", turns=2)
    with mock_model([spec]) as inner:
        client, seen = _flaky_client(inner, failures=2)
        record = ScriptedAgent(client, retry=RetryPolicy(max_attempts=3)).run(spec)
    assert record.failure is None
    assert [a.outcome for a in record.calls[0].attempts] == ["server_unavailable", "server_unavailable", "ok"]
    assert seen[0] == seen[1] == seen[2]
    assert seen[0]["metadata"] == seen[3]["metadata"] == {"compactsim_rollout_id": spec.rollout_id}
    assert record.calls[0].request == seen[2]


def test_turn_hints_are_optional_and_carry_the_attempt(mock_model, spec_for):
    spec = spec_for("identity", turns=2)
    with mock_model([spec]) as inner:
        client, seen = _flaky_client(inner, failures=2)
        record = ScriptedAgent(client, retry=RetryPolicy(max_attempts=3), send_turn_hints=True).run(spec)
    assert record.failure is None
    assert [body["metadata"].get("compactsim_attempt") for body in seen[:3]] == [None, "2", "3"]
    assert [body["metadata"]["compactsim_turn"] for body in seen] == ["1", "1", "1", "2"]


def test_retries_back_off_exponentially_up_to_the_cap(mock_model, spec_for):
    spec = spec_for("identity", turns=1)
    slept: list[float] = []
    with mock_model([spec]) as inner:
        client, _ = _flaky_client(inner, failures=3)
        policy = RetryPolicy(max_attempts=4, backoff_s=0.5, max_backoff_s=1.5)
        ScriptedAgent(client, retry=policy, sleep=slept.append).run(spec)
    assert slept == [0.5, 1.0, 1.5]


def test_probabilistic_faults_are_reproducible_and_always_classified(mock_model, spec_for):
    specs = [spec_for("recency-images-k2", turns=4, rollout_id=f"r{i}", rollout_index=i) for i in range(6)]
    faults = [{"kind": "http_503", "probability": 0.5}]

    def run_all():
        with mock_model(specs, faults=faults) as client:
            agent = ScriptedAgent(client, retry=RetryPolicy(max_attempts=3))
            return [agent.run(s) for s in specs]

    first, second = run_all(), run_all()
    outcomes = [(r.failure.kind if r.failure else "ok", [a.outcome for c in r.calls for a in c.attempts]) for r in first]
    assert outcomes == [(r.failure.kind if r.failure else "ok", [a.outcome for c in r.calls for a in c.attempts])
                        for r in second]
    assert {o for o, _ in outcomes} <= {"ok", "server_unavailable"}
    assert any(o == "ok" and "server_unavailable" in attempts for o, attempts in outcomes)


def test_connection_errors_are_retried_then_classified():
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    client = httpx.Client(transport=httpx.MockTransport(handler), base_url="http://test")
    with pytest.raises(Exception) as exc:
        post_json(client, "/v1/responses", {}, retry=RetryPolicy(max_attempts=2))
    assert (exc.value.kind, len(exc.value.attempts)) == ("connection", 2)
    assert str(exc.value) == "ConnectError: refused (gave up after 2 attempt(s))"


def test_timeouts_are_retried_then_classified():
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    client = httpx.Client(transport=httpx.MockTransport(handler), base_url="http://test")
    with pytest.raises(Exception) as exc:
        post_json(client, "/v1/responses", {}, retry=RetryPolicy(max_attempts=3))
    assert (exc.value.kind, len(exc.value.attempts)) == ("timeout", 3)


def test_agent_refuses_a_client_without_read_timeout():
    with pytest.raises(ValueError, match="no read timeout"):
        ScriptedAgent(httpx.Client(timeout=None))


def test_retry_policy_rejects_zero_attempts():
    with pytest.raises(ValueError, match="max_attempts=0: expected >= 1"):
        RetryPolicy(max_attempts=0)


def test_chat_route_records_the_same_tokens_and_boundaries_as_responses(run_agent, spec_for):
    spec = spec_for("recency-images-k2", turns=5)
    via_responses = run_agent(spec)
    via_chat = run_agent(spec.model_copy(update={"endpoint": "chat"}))
    assert via_chat.failure is None
    for a, b in zip(via_responses.calls, via_chat.calls, strict=True):
        assert (a.observed.prompt_token_ids, a.observed.sampled_token_ids, a.observed.media_ids) == (
            b.observed.prompt_token_ids, b.observed.sampled_token_ids, b.observed.media_ids)
        assert (a.observed.compaction_event_id is None) == (b.observed.compaction_event_id is None)
    # item and call ids come from each route's own response id, so view digests (and event ids) differ
    assert [e.applies_to_step for e in via_chat.boundary_events] == [4, 5]
    assert "messages" in via_chat.calls[1].request
    assert via_chat.calls[1].request["required_prefix_token_ids"] is not None
    assert [it["type"] for it in via_chat.calls[0].output_items] == ["reasoning", "function_call"]


def test_a_model_that_never_stops_calling_tools_is_capped(mock_model, spec_for):
    script = RolloutScript(turns=tuple(TurnScript(tool_calls=(ToolCallSpec(name="noop"),)) for _ in range(8)))
    spec = spec_for("identity").model_copy(update={"script": script})
    with mock_model([spec]) as client:
        record = ScriptedAgent(client, step_cap=5).run(spec)
    assert (record.stop_reason, len(record.calls)) == ("max_steps", 5)


def test_finish_length_fault_ends_the_rollout_as_truncated(run_agent, spec_for):
    record = run_agent(spec_for(turns=4), faults=[{"kind": "finish_length", "turn": 2}])
    assert (record.failure, record.stop_reason, len(record.calls)) == (None, "length", 2)
    assert record.calls[-1].observed.sampled_token_ids[-1] != 4  # the <|turn_end|> stop token was cut
