"""Mutated request bodies get a JSON answer with a 2xx or 4xx status from the mock servers, never a 500.

Each example starts from a valid body of one route (chat, Responses, /tokenize, the reward
server's /verify) and applies a few structural mutations: a value replaced by a value of another
JSON type (a scalar where a container was, and the reverse), any scalar or small container, or a subtree of another valid body (a message where a string belongs, a
content list where an object belongs); a key or list entry removed; a key or entry added. These
are the shapes a buggy client or a new Gym revision sends. This fuzz found `"tool_calls": 1` and
`"output": 5` crashing the template and the reward lookup with a TypeError (now 422s that name the field).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from compactsim.mock_servers.model_server import ServerSettings
from compactsim.mock_servers.reward_server import RewardRule, RewardSettings
from compactsim.mock_servers.reward_server import create_app as create_reward_app
from tests.property.json_paths import at, paths
from tests.unit.mock_servers.model_server.server_builders import IMAGE_URL, SCRIPT, SyncASGIClient, client_for, meta

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")

CHAT = {
    "model": "m",
    "messages": [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": IMAGE_URL}}]},
        {"role": "assistant", "content": "ok", "reasoning_content": "r",
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "click", "arguments": "{\"x\": 1}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ],
    "logprobs": True, "top_logprobs": 2, "return_tokens_as_token_ids": True, "return_token_ids": True, "max_tokens": 50,
    "metadata": meta("r1", 2), "temperature": 1.0,
    "tools": [{"type": "function", "function": {"name": "click", "parameters": {}}}],
}
RESPONSES = {
    "model": "m",
    "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "hi"}, {"type": "input_image", "image_url": IMAGE_URL}]},
        {"type": "reasoning", "id": "rs", "summary": [{"type": "summary_text", "text": "s"}]},
        {"type": "function_call", "call_id": "c1", "name": "click", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    ],
    "instructions": "be brief", "max_output_tokens": 30, "top_logprobs": 1, "metadata": meta("r1", 3), "tools": [],
}
TOKENIZE = {"messages": [{"role": "user", "content": "hello"}], "add_generation_prompt": True}
VERIFY = {
    "responses_create_params": {"input": [{"role": "user", "content": "q"}]},
    "response": {"output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "42"}]}],
                 "context_compaction_contract": {"rollout_id": "r1", "rollout_index": 1}},
    "rollout_index": 3,
}
MODEL_ROUTES = [("/v1/chat/completions", CHAT), ("/v1/responses", RESPONSES), ("/tokenize", TOKENIZE), ("/tokenize", CHAT)]

_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**64), 2**64), st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8), st.sampled_from(["user", "assistant", "tool", "message", "reasoning", "function_call",
                                          "input_image", "image_url", "text", "<|image|>", "token_id:5", "\ud800"]),
)
_containers = st.one_of(st.lists(_scalars, max_size=2), st.dictionaries(st.text(max_size=4), _scalars, max_size=2))
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                       max_leaves=6)


@st.composite
def mutated(draw: st.DrawFn, base: dict) -> dict:
    """`base` with one to three mutations (see the module docstring)."""
    body = copy.deepcopy(base)
    donors = [CHAT, RESPONSES, TOKENIZE, VERIFY]
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths(body)[1:] or [()]))
        if not path:
            break
        parent, key = at(body, path[:-1]), path[-1]
        action = draw(st.sampled_from(["flip", "flip", "replace", "graft", "remove", "add"]))
        if action == "flip":  # a value of another JSON type: a container where a scalar was, and the reverse
            parent[key] = draw(_scalars if isinstance(parent[key], dict | list) else _containers)
        elif action == "replace":
            parent[key] = draw(_values)
        elif action == "graft":
            donor = draw(st.sampled_from(donors))
            parent[key] = copy.deepcopy(at(donor, draw(st.sampled_from(paths(donor)))))
        elif action == "remove":
            del parent[key]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=6))] = draw(_values)
        else:
            parent.append(draw(_values))
    return body


def _raw(body: dict, ascii_only: bool) -> bytes:
    return json.dumps(body, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


def _assert_answered(status: int, content: bytes, route: str, raw: bytes) -> None:
    assert status < 500 and status in (200, 400, 409, 413, 422), (route, status, content[:300], raw[:500])
    json.loads(content)  # every answer is JSON


@pytest.fixture(scope="module")
def model_client():
    with client_for(ServerSettings(seed=0, script=SCRIPT)) as client:
        yield client


@pytest.fixture(scope="module")
def reward_client():
    client = SyncASGIClient(create_reward_app(RewardSettings(rule=RewardRule(kind="predicate", contains="4"))))
    try:
        yield client
    finally:
        client.close()


@hypothesis_settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), route=st.sampled_from(MODEL_ROUTES), ascii_only=st.booleans())
def test_mutated_model_server_bodies_get_a_json_4xx_or_an_answer(model_client, data, route, ascii_only):
    path, base = route
    raw = _raw(data.draw(mutated(base)), ascii_only)
    resp = model_client.post(path, content=raw, headers={"content-type": "application/json"})
    _assert_answered(resp.status_code, resp.content, path, raw)


@hypothesis_settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), ascii_only=st.booleans())
def test_mutated_verify_bodies_get_a_json_422_or_a_reward(reward_client, data, ascii_only):
    raw = _raw(data.draw(mutated(VERIFY)), ascii_only)
    resp = reward_client.post("/verify", content=raw, headers={"content-type": "application/json"})
    _assert_answered(resp.status_code, resp.content, "/verify", raw)
