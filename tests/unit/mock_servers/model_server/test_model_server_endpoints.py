"""Endpoint contracts of the mock model server in scripted mode: shapes, prefix, tokenize, limits, errors."""

from __future__ import annotations

import builtins
import hashlib
import json

import numpy as np
import pytest

from compactsim.harness.core import chat_template as ct
from compactsim.harness.core import tokenizer as tok
from compactsim.harness.core.digests import canonical_digest
from compactsim.mock_servers.model_server import Limits, ScriptStep, ServerSettings
from compactsim.mock_servers.model_server.sampling import scripted_logprobs, scripted_routes
from tests.unit.mock_servers.model_server.server_builders import IMAGE_URL, SCRIPT, chat_body, client_for, meta, user_items


def test_chat_completion_returns_gym_token_extensions(scripted_settings):
    messages = [{"role": "user", "content": [{"type": "text", "text": "open settings"},
                                             {"type": "image_url", "image_url": {"url": IMAGE_URL}}]}]
    with client_for(scripted_settings) as c:
        r = c.post("/v1/chat/completions", json=chat_body(messages, metadata=meta("r1", 1)))
    assert r.status_code == 200
    body = r.json()
    prompt = list(ct.render_chat(messages).token_ids)
    sampled = ct.encode_action(SCRIPT["r1"][0].action())
    choice = body["choices"][0]
    assert body["prompt_token_ids"] == prompt
    assert choice["token_ids"] == sampled
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["reasoning_content"] == "need a look"
    assert choice["message"]["content"] is None
    assert [t["function"] for t in choice["message"]["tool_calls"]] == [{"name": "screenshot", "arguments": "{}"}]
    p, g = len(prompt), len(sampled)
    want_lp = scripted_logprobs(7, "r1", 1, np.arange(p, p + g)).tolist()
    assert [e["token"] for e in choice["logprobs"]["content"]] == [f"token_id:{t}" for t in sampled]
    assert [e["logprob"] for e in choice["logprobs"]["content"]] == want_lp
    routes = np.array(choice["message"]["routed_experts"])
    assert routes.shape == (p + g, 2, 2)
    assert routes[-1].tolist() == [[0, 1], [0, 1]]
    assert np.array_equal(routes[:-1], scripted_routes(7, "r1", 1, p + g, 2, 4, 2)[:-1])
    assert body["usage"] == {"prompt_tokens": p, "completion_tokens": g, "total_tokens": p + g}
    assert body["policy_version"] == 0


def test_responses_put_token_fields_on_the_last_item_only(scripted_settings):
    with client_for(scripted_settings) as c:
        r = c.post("/v1/responses", json={"input": user_items(), "metadata": meta("r1", 2), "required_prefix_token_ids": None})
    assert r.status_code == 200
    out = r.json()["output"]
    assert [o["type"] for o in out] == ["reasoning", "function_call"]
    assert "prompt_token_ids" not in out[0]
    last = out[-1]
    assert last["name"] == "click" and last["arguments"] == '{"x":5}'
    assert last["prompt_token_ids"] == list(ct.render_prompt(user_items()).token_ids)
    assert last["generation_token_ids"] == ct.encode_action(SCRIPT["r1"][1].action())
    assert len(last["generation_log_probs"]) == len(last["generation_token_ids"])
    assert np.array(last["routed_experts"]).shape == (len(last["prompt_token_ids"]) + len(last["generation_token_ids"]), 2, 2)
    assert r.json()["status"] == "completed"


def test_tokenize_equals_the_prompt_ids_of_the_same_body(scripted_settings):
    chat = chat_body([{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}])
    resp = {"input": user_items(), "instructions": "be brief", "metadata": meta("r1", 1)}
    with client_for(scripted_settings) as c:
        chat_ids = c.post("/v1/chat/completions", json=chat).json()["prompt_token_ids"]
        resp_ids = c.post("/v1/responses", json=resp).json()["output"][-1]["prompt_token_ids"]
        assert c.post("/tokenize", json=chat).json()["tokens"] == chat_ids
        tokenized = c.post("/tokenize", json=resp).json()
        assert tokenized["tokens"] == resp_ids
        assert tokenized["media_ids"] == list(ct.render(user_items()).media_ids)
        assert c.post("/tokenize", json={"prompt": "ab"}).json()["tokens"] == tok.encode_text("ab")


def test_required_prefix_from_the_previous_call_is_accepted(scripted_settings):
    items = user_items()
    with client_for(scripted_settings) as c:
        first = c.post("/v1/responses", json={"input": items, "metadata": meta("r1", 1)}).json()
        last = first["output"][-1]
        prefix = last["prompt_token_ids"] + last["generation_token_ids"]
        items2 = items + first["output"] + [{"type": "function_call_output", "call_id": last["call_id"], "output": "shot"}]
        second = c.post("/v1/responses", json={"input": items2, "metadata": meta("r1", 2), "required_prefix_token_ids": prefix})
    assert second.status_code == 200
    assert second.json()["output"][-1]["prompt_token_ids"][: len(prefix)] == prefix


def test_required_prefix_that_does_not_match_is_rejected_with_400(scripted_settings):
    prompt = list(ct.render_prompt(user_items(image=False)).token_ids)
    bad = prompt[:3] + [tok.ROLE_SYSTEM]
    with client_for(scripted_settings) as c:
        r = c.post("/v1/responses", json={"input": user_items(image=False), "required_prefix_token_ids": bad})
        log = c.get("/request_log").json()["entries"]
    assert r.status_code == 400
    assert r.json()["detail"] == (
        "required_prefix_token_ids is not a prefix of the rendered prompt: "
        f"required_count=4 prompt_count={len(prompt)} first_mismatch_index=3 required_token=5 prompt_token={prompt[3]}"
    )
    assert log[-1]["status"] == 400


def test_required_prefix_longer_than_the_prompt_is_rejected(scripted_settings):
    prompt = list(ct.render_prompt("hi").token_ids)
    with client_for(scripted_settings) as c:
        r = c.post("/v1/chat/completions", json=chat_body(required_prefix_token_ids=prompt + [4]))
    assert r.status_code == 400
    assert f"required_count={len(prompt) + 1} prompt_count={len(prompt)}" in r.json()["detail"]


def test_models_and_health_report_policy_version(scripted_settings):
    with client_for(scripted_settings) as c:
        assert c.get("/health").json() == {"status": "ok", "mode": "scripted", "policy_version": 0,
                                           "request_log_file": None}
        models = c.get("/v1/models").json()
    assert models["data"][0]["id"] == "compactsim-tiny-moe"
    assert models["data"][0]["policy_version"] == 0


def test_without_metadata_the_answer_is_a_digest_derived_final_message(scripted_settings):
    body = chat_body()
    with client_for(scripted_settings) as c:
        msg = c.post("/v1/chat/completions", json=body).json()["choices"][0]
    assert msg["message"]["content"] == f"Done ({canonical_digest(body)[:8]})."
    assert msg["finish_reason"] == "stop"


def test_max_tokens_cuts_generation_and_reports_length(scripted_settings):
    with client_for(scripted_settings) as c:
        chat = c.post("/v1/chat/completions", json=chat_body(metadata=meta("r1", 3), max_tokens=4)).json()["choices"][0]
        resp = c.post("/v1/responses", json={"input": "hi", "metadata": meta("r1", 3), "max_output_tokens": 4}).json()
    assert chat["finish_reason"] == "length"
    assert chat["token_ids"] == tok.encode_text("Sett")
    assert chat["message"]["content"] == "Sett"
    assert resp["status"] == "incomplete"
    assert resp["incomplete_details"] == {"reason": "max_output_tokens"}


def test_script_logprobs_override_the_derived_markers():
    step = ScriptStep(text="ab", logprobs=(-0.5, -0.25, -0.125))
    settings = ServerSettings(seed=1, script={"x": (step,)})
    with client_for(settings) as c:
        out = c.post("/v1/responses", json={"input": "q", "metadata": meta("x", 1)}).json()["output"][-1]
    assert out["generation_log_probs"] == [-0.5, -0.25, -0.125]


def test_script_logprobs_of_the_wrong_length_are_rejected_at_settings_time():
    with pytest.raises(ValueError) as err:
        ScriptStep(text="ab", logprobs=(-0.5,))
    assert "logprobs has 1 values; the step samples 3 ids" in str(err.value)


def test_scripted_routes_differ_between_calls_and_seeds():
    a = scripted_routes(7, "r1", 1, 50, 2, 4, 2)
    assert np.array_equal(a, scripted_routes(7, "r1", 1, 50, 2, 4, 2))
    assert not np.array_equal(a, scripted_routes(7, "r1", 2, 50, 2, 4, 2))
    assert not np.array_equal(a, scripted_routes(8, "r1", 1, 50, 2, 4, 2))
    assert all(len(set(row)) == 2 for row in a.reshape(-1, 2).tolist())


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"messages": "hi"}, ["body", "messages"]),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, ["body", "max_tokens"]),
        ({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 99}, ["body", "top_logprobs"]),
        ({"messages": [{"role": "user", "content": "x"}], "stream": True}, ["body", "stream"]),
        ({"messages": [{"role": "user", "content": "x"}], "required_prefix_token_ids": ["a"]}, ["body", "required_prefix_token_ids", 0]),
    ],
)
def test_invalid_chat_bodies_get_422_naming_the_field(scripted_settings, body, loc):
    with client_for(scripted_settings) as c:
        r = c.post("/v1/chat/completions", json=body)
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == loc


def test_template_errors_get_422_naming_the_item_path(scripted_settings):
    with client_for(scripted_settings) as c:
        r = c.post("/v1/responses", json={"input": [{"type": "message", "role": "user", "content": [{"type": "input_file"}]}]})
        bad_turn = c.post("/v1/responses", json={"input": "x", "metadata": {"compactsim_rollout_id": "r1", "compactsim_turn": "zero"}})
        not_json = c.post("/v1/responses", content=b"{nope", headers={"content-type": "application/json"})
    assert r.status_code == 422
    assert r.json()["detail"].startswith("input[0].content[0].type: unsupported content part type 'input_file'")
    assert bad_turn.status_code == 422
    assert bad_turn.json()["detail"] == "metadata.compactsim_turn: expected an int >= 1 (or its decimal string), found 'zero'"
    assert not_json.status_code == 422
    assert not_json.json()["detail"][0]["type"] == "json_invalid"


def test_tool_calls_that_are_not_a_list_get_422_on_every_prompt_route(scripted_settings):
    """Fuzz finding: `"tool_calls": 1` in an assistant message was a 500 (TypeError) on chat and /tokenize."""
    messages = [{"role": "user", "content": "go"}, {"role": "assistant", "content": "ok", "tool_calls": 1}]
    with client_for(scripted_settings) as c:
        answers = [c.post("/v1/chat/completions", json={"messages": messages}), c.post("/tokenize", json={"messages": messages})]
        log = c.get("/request_log").json()["entries"]
    for r in answers:
        assert r.status_code == 422, r.text
        assert r.json()["detail"] == "messages[1].tool_calls: expected a list of tool calls, found int"
    assert [(e["endpoint"], e["status"]) for e in log] == [("chat", 422), ("tokenize", 422)]


def test_oversized_body_gets_413():
    settings = ServerSettings(limits=Limits(max_body_bytes=1024))
    with client_for(settings) as c:
        r = c.post("/v1/chat/completions", json=chat_body([{"role": "user", "content": "x" * 2000}]))
    assert r.status_code == 413
    assert r.json()["detail"].endswith("the limit is 1024")


def test_oversized_image_gets_413():
    settings = ServerSettings(limits=Limits(max_image_bytes=64))
    big = "data:image/png;base64," + "A" * 400
    with client_for(settings) as c:
        r = c.post("/v1/responses", json={"input": [{"role": "user", "content": [{"type": "input_image", "image_url": big}]}]})
    assert r.status_code == 413
    assert r.json() == {"detail": "input: image 0 is 300 bytes; the limit is 64", "limit": "max_image_bytes", "field": "input"}


def test_image_paths_are_rejected_without_being_read(scripted_settings, tmp_path, monkeypatch):
    secret = tmp_path / "secret.png"
    secret.write_bytes(b"not for you")
    opened: list[str] = []
    real_open = builtins.open

    def spy(file, *args, **kwargs):
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    with client_for(scripted_settings) as c:
        monkeypatch.setattr(builtins, "open", spy)
        for url in (str(secret), f"file://{secret}", "http://127.0.0.1:9/x.png"):
            r = c.post("/v1/responses", json={"input": [{"role": "user", "content": [{"type": "input_image", "image_url": url}]}]})
            assert r.status_code == 422
            assert "only base64 data:image/... URLs are accepted" in r.json()["detail"]
        monkeypatch.undo()
    assert not any("secret" in f for f in opened)


def test_request_log_records_request_and_response_digests(scripted_settings):
    body = chat_body(metadata=meta("r1", 3))
    with client_for(scripted_settings) as c:
        r = c.post("/v1/chat/completions", json=body)
        entries = c.get("/request_log").json()["entries"]
    assert entries == [{
        "seq": 0, "endpoint": "chat", "status": 200, "request_digest": canonical_digest(body),
        "response_digest": hashlib.sha256(r.content).hexdigest(), "policy_version": 0, "rollout_id": "r1", "turn": 3,
        "faults": [], "prompt_tokens": len(body and ct.render_chat(body["messages"]).token_ids),
        "generated_tokens": len(r.json()["choices"][0]["token_ids"]), "detail": None,
        "attempt": 1, "key_source": "rollout=metadata turn=metadata attempt=derived", "file_error": None,
    }]


def test_request_log_is_mirrored_to_a_jsonl_file(tmp_path):
    path = tmp_path / "log.jsonl"
    with client_for(ServerSettings(request_log_path=str(path))) as c:
        c.post("/v1/chat/completions", json=chat_body())
        c.post("/v1/chat/completions", json={"messages": 3})
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [(e["endpoint"], e["status"]) for e in lines] == [("chat", 200), ("chat", 422)]


def test_drift_setting_renders_prompts_with_that_drift():
    with client_for(ServerSettings(drift="merge")) as c:
        ids = c.post("/v1/chat/completions", json=chat_body([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}])).json()["prompt_token_ids"]
    assert tok.TURN_SEP in ids and tok.TURN_END not in ids


def test_an_unwritable_request_log_is_refused_when_the_app_is_built(tmp_path):
    """Not a 500 on every request: the log file is opened once when the server is built."""
    from compactsim.harness.core.errors import ConfigError
    from compactsim.mock_servers.model_server import create_app

    with pytest.raises(ConfigError, match="request_log_path .*: cannot append to it: Not a directory"):
        (tmp_path / "afile").write_text("x")
        create_app(ServerSettings(request_log_path=str(tmp_path / "afile" / "log.jsonl")))
    create_app(ServerSettings(request_log_path=str(tmp_path / "log.jsonl")))
    assert (tmp_path / "log.jsonl").read_text() == ""  # created empty, appended to per request


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/tokenize"])
def test_an_accepted_body_is_decoded_once_and_a_malformed_one_keeps_fastapis_422(scripted_settings, monkeypatch, path):
    """The limits' reader decodes the body and the pipeline reuses that object (a large body costs one decode)."""
    decodes: list[int] = []
    real = json.JSONDecoder.decode

    def counting(self, s, *args, **kwargs):
        decodes.append(len(s))
        return real(self, s, *args, **kwargs)

    monkeypatch.setattr(json.JSONDecoder, "decode", counting)
    body = chat_body(metadata=meta("r1", 1)) if path != "/tokenize" else {"messages": chat_body()["messages"]}
    raw = json.dumps(body).encode()
    with client_for(scripted_settings) as c:
        assert c.post(path, content=raw, headers={"content-type": "application/json"}).status_code == 200
        assert decodes.count(len(raw)) == 1
        bad = c.post(path, content=b'{"messages": [', headers={"content-type": "application/json"})
    assert (bad.status_code, bad.json()["detail"][0]["type"]) == (422, "json_invalid")
