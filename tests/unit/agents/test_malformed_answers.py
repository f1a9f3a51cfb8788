"""A 200 answer of the wrong shape ends the rollout as ``malformed_response`` naming the field and the turn.

Found by fuzzing the agent against a server whose answers were mutated: a tool call that is a
number, token ids that are strings, a logprob entry without a number, a reward that is a list and
a lone surrogate in the text all raised a `TypeError`/`ValueError`/`UnicodeEncodeError` from inside
the agent instead of a classified failure.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from compactsim.agents.collect import InProcessServers, server_script
from compactsim.agents.collect.rollouts import run_rollout
from compactsim.agents.rollout.loop import RetryPolicy, ScriptedAgent
from compactsim.agents.rollout.response_checks import (
    chat_completion_problem,
    lone_surrogate_problem,
    output_item_problem,
    responses_problem,
    reward_problem,
)
from compactsim.agents.rollout.session import EvidenceViolation, capture_observed_completion

Edit = Callable[[dict[str, Any]], None]
NO_DELAY = RetryPolicy(max_attempts=2, backoff_s=0.0)


def _proxy(inner: httpx.Client, path: str, turn: int, edit: Edit) -> httpx.Client:
    """A client whose answers from `path` are the server's, with `edit` applied to those of call `turn` (and its retries)."""
    seen: dict[str, int] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        body = request.content
        resp = inner.post(request.url.path, content=body, headers={"content-type": "application/json"})
        if request.url.path != path:
            return httpx.Response(resp.status_code, content=resp.content)
        key = json.dumps(json.loads(body).get("input", json.loads(body).get("messages")), sort_keys=True)
        seen.setdefault(key, len(seen) + 1)  # a retry repeats its call's body: same turn
        if seen[key] != turn:
            return httpx.Response(resp.status_code, content=resp.content)
        data = resp.json()
        edit(data)
        return httpx.Response(200, content=json.dumps(data, ensure_ascii=True).encode("ascii"))

    return httpx.Client(transport=httpx.MockTransport(handler), base_url="http://model", timeout=10.0)


def _set(path: tuple, value: Any) -> Edit:
    def edit(data: dict[str, Any]) -> None:
        node: Any = data
        for key in path[:-1]:
            node = node[key]
        node[path[-1] if path[-1] != -1 else len(node) - 1] = value
    return edit


def _last_output(key: str, value: Any) -> Edit:
    def edit(data: dict[str, Any]) -> None:
        data["output"][-1][key] = value
    return edit


CHAT_EDITS = [
    (_set(("choices", 0, "message", "tool_calls"), 1), "choices[0].message.tool_calls: expected a list or null, found int"),
    (_set(("choices", 0, "message", "tool_calls", 0, "function", "name"), 7),
     "choices[0].message.tool_calls[0].function.name: expected a string, found int"),
    (_set(("choices", 0, "message", "reasoning_content"), ["r"]), "choices[0].message.reasoning_content: expected a string or null, found list"),
    (_set(("choices", 0, "token_ids", 0), "a"), "choices[0].token_ids[0]: expected an int token id, found str"),
    (_set(("prompt_token_ids", 1), True), "prompt_token_ids[1]: expected an int token id, found bool"),
    (_set(("choices", 0, "logprobs", "content", 0), {"token": "x"}), "choices[0].logprobs.content[0].logprob: expected a number"),
    (_set(("choices", 0, "message", "reasoning_content"), "bad \ud800 text"), "a string holds a lone UTF-16 surrogate ('\\ud800'), which is not text"),
]


@pytest.mark.parametrize(("edit", "detail"), CHAT_EDITS, ids=[d.split(":")[0] for _, d in CHAT_EDITS])
def test_a_malformed_chat_answer_fails_the_rollout_as_malformed_response(spec_for, mock_model, edit, detail):
    spec = spec_for("identity", turns=4)
    with mock_model([spec]) as inner:
        record = ScriptedAgent(_proxy(inner, "/v1/chat/completions", 2, edit), retry=NO_DELAY).run(spec)
    assert record.failure is not None
    assert (record.failure.kind, record.failure.turn_id, record.failure.attempts, len(record.calls)) == (
        "malformed_response", 2, 2, 1)
    assert record.failure.detail == f"{detail} (gave up after 2 attempt(s))"


RESPONSES_EDITS = [
    (_last_output("generation_token_ids", [1.5]), "generation_token_ids[0]: expected an int token id, found float"),
    (_last_output("generation_log_probs", ["x"]), "generation_log_probs[0]: expected a number, found str"),
    (_last_output("prompt_token_ids", {"0": 1}), "prompt_token_ids: expected a list of token ids, found dict"),
    (_set(("incomplete_details",), "max_output_tokens"), "incomplete_details: expected an object or null, found str"),
]


@pytest.mark.parametrize(("edit", "detail"), RESPONSES_EDITS, ids=[d.split(":")[0] for _, d in RESPONSES_EDITS])
def test_a_malformed_responses_answer_fails_the_rollout_as_malformed_response(spec_for, mock_model, edit, detail):
    spec = spec_for("identity", turns=3).model_copy(update={"endpoint": "responses"})
    with mock_model([spec]) as inner:
        record = ScriptedAgent(_proxy(inner, "/v1/responses", 1, edit), retry=NO_DELAY).run(spec)
    assert record.failure is not None
    assert (record.failure.kind, record.failure.turn_id, len(record.calls)) == ("malformed_response", 1, 0)
    assert detail in record.failure.detail


@pytest.mark.parametrize(("answer", "detail"), [
    ({"reward": [1.0]}, "reward: expected a finite number, found [1.0]"),
    ({"reward": "1"}, "reward: expected a finite number, found '1'"),
    ({"reward": True}, "reward: expected a finite number, found True"),
    ({"reward": float("nan")}, "reward: expected a finite number, found nan"),
    ({"reward": 1.0, "instance_config": "x"}, "instance_config: expected an object or null, found str"),
    ({"reward": 1.0, "instance_config": {"mask_sample": "yes"}}, "instance_config.mask_sample: expected a boolean, found str"),
])
def test_a_malformed_reward_fails_the_rollout_naming_the_field(spec_for, answer, detail):
    spec = spec_for("identity", turns=2)
    servers = InProcessServers({"seed": 0, "script": server_script([spec])}, {})
    reward = httpx.Client(transport=httpx.MockTransport(lambda _: httpx.Response(200, content=json.dumps(answer).encode())),
                          base_url="http://reward", timeout=10.0)
    with servers.open() as (model, _):
        collected = run_rollout(spec, model_client=model, reward_client=reward, retry=NO_DELAY)
    assert (collected.status, collected.result) == ("failed", None)
    failure = collected.ground_truth["outcome"]["failure"]
    assert failure["kind"] == "malformed_response"
    assert failure["detail"] == f"verify: {detail} (gave up after 2 attempt(s))"


def test_well_formed_answers_have_no_problem():
    assert chat_completion_problem({"choices": [{"message": {"content": None, "tool_calls": None}, "logprobs": None}]}) is None
    assert responses_problem({"output": [], "incomplete_details": None}) is None
    assert reward_problem({"reward": -2, "instance_config": None}) is None
    assert output_item_problem({"type": "message", "prompt_token_ids": [1], "generation_token_ids": [],
                                "generation_log_probs": []}, "output[0]") is None


def test_surrogate_pairs_are_text_and_only_lone_halves_are_refused():
    pair = json.dumps({"t": "\U0001f600"}, ensure_ascii=True).encode()  # written as the escapes \ud83d\ude00
    assert lone_surrogate_problem(pair, json.loads(pair)) is None
    lone = b'{"t": "a\\udc80"}'
    assert lone_surrogate_problem(lone, json.loads(lone)) == "a string holds a lone UTF-16 surrogate ('\\udc80'), which is not text"


def test_the_evidence_capture_refuses_token_fields_of_the_wrong_type_itself(reference_record):
    """Callers that skip the agent's check (a live Gym capture) still get a typed violation, not a TypeError."""
    call = reference_record.calls[0]
    item = {"type": "message", "prompt_token_ids": [1, "2"], "generation_token_ids": [3], "generation_log_probs": [-0.5]}
    with pytest.raises(EvidenceViolation) as err:
        capture_observed_completion([item], rollout_id="r", call=call.prepared, generation_contract_id="g", finish_reason=None)
    assert err.value.rule == "token_evidence_type"
    assert str(err.value) == "the generation evidence item.prompt_token_ids[1]: expected an int token id, found str"
