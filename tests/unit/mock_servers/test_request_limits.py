"""Client input over a request limit gets a 4xx JSON answer naming the limit and the field, never a 500."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from fastapi.testclient import TestClient

from compactsim.mock_servers.limits import JsonLimits, LimitExceeded, _NonFinite, check_tree, load_json
from compactsim.mock_servers.model_server import Limits, ServerSettings
from compactsim.mock_servers.model_server.limits import prompt_text_bytes
from compactsim.mock_servers.reward_server import RewardSettings
from compactsim.mock_servers.reward_server import create_app as create_reward_app
from tests.unit.mock_servers.model_server.server_builders import SCRIPT, chat_body, client_for, meta

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")

HI = '"messages":[{"role":"user","content":"hi"}]'


def _raw(text: str) -> bytes:
    return text.encode("utf-8")


#: (name, endpoint, raw body, status, limit, field): each row is a bad input a user could send
BAD_MODEL_BODIES = [
    ("5000-digit max_tokens", "/v1/chat/completions", _raw("{" + HI + ',"max_tokens":' + "9" * 5000 + "}"),
     422, "max_int_digits", "max_tokens"),
    ("negative 5000-digit id", "/v1/chat/completions", _raw("{" + HI + ',"required_prefix_token_ids":[1,-' + "9" * 5000 + "]}"),
     422, "max_int_digits", "required_prefix_token_ids[1]"),
    ("100k nested brackets", "/v1/chat/completions", _raw("{" + HI + ',"x":' + "[" * 100_000 + "]" * 100_000 + "}"),
     422, "max_json_depth", "body"),
    ("65 nested objects", "/v1/responses", _raw('{"input":"hi","metadata":' + '{"a":' * 64 + "1" + "}" * 64 + "}"),
     422, "max_json_depth", "metadata" + ".a" * 63),
    ("Infinity temperature", "/v1/chat/completions", _raw("{" + HI + ',"temperature":Infinity}'),
     422, "finite_numbers", "temperature"),
    ("overflowing temperature", "/v1/responses", _raw('{"input":"hi","temperature":1e999}'),
     422, "finite_numbers", "temperature"),
    ("NaN top_p", "/v1/chat/completions", _raw("{" + HI + ',"top_p":NaN}'), 422, "finite_numbers", "top_p"),
    ("huge compactsim_turn string", "/v1/responses",
     json.dumps({"input": "hi", "metadata": {"compactsim_rollout_id": "r1", "compactsim_turn": "9" * 5000}}).encode(),
     422, "max_metadata_value_chars", "metadata.compactsim_turn"),
    ("huge compactsim_turn int", "/v1/chat/completions",
     _raw("{" + HI + ',"metadata":{"compactsim_rollout_id":"r1","compactsim_turn":' + "9" * 400 + "}}"),
     422, "max_int_digits", "metadata.compactsim_turn"),
    ("superscript compactsim_turn", "/v1/responses",
     json.dumps({"input": "hi", "metadata": {"compactsim_rollout_id": "r1", "compactsim_turn": "\u00b2"}}).encode(),
     422, "max_int_digits", "metadata.compactsim_turn"),
    ("prompt over max_prompt_tokens", "/v1/chat/completions",
     json.dumps(chat_body([{"role": "user", "content": "x" * 40_000}])).encode(), 422, "max_prompt_tokens", "messages[0].content"),
    ("tokenize prompt over the cap", "/tokenize", json.dumps({"prompt": "a" * 5_000_000}).encode(),
     422, "max_prompt_tokens", "prompt"),
    ("lone surrogate in the prompt", "/v1/responses", b'{"input":"hi \\ud800"}', 422, "unicode_text", "input"),
    ("lone surrogate in a key", "/v1/chat/completions", _raw("{" + HI + ',"metadata":{"\\udfff":"x"}}'),
     422, "unicode_text", "metadata"),
    ("object as a role", "/tokenize", json.dumps({"messages": [{"role": {"a": 1}, "content": "hi"}]}).encode(),
     422, "string_fields", "messages[0].role"),
    ("list as an item type", "/v1/responses", json.dumps({"input": [{"type": [1], "role": "user"}]}).encode(),
     422, "string_fields", "input[0].type"),
    ("prefix longer than any prompt", "/v1/chat/completions",
     json.dumps(chat_body(required_prefix_token_ids=[1] * 32_769)).encode(), 422, "max_prompt_tokens", "required_prefix_token_ids"),
]


@pytest.mark.parametrize(("name", "path", "raw", "status", "limit", "field"), BAD_MODEL_BODIES, ids=[r[0] for r in BAD_MODEL_BODIES])
def test_model_server_answers_bad_input_with_a_typed_4xx(name, path, raw, status, limit, field):
    with client_for(ServerSettings(seed=7, script=SCRIPT)) as c:
        r = c.post(path, content=raw, headers={"content-type": "application/json"})
        log = c.get("/request_log").json()["entries"]
        ok = c.post("/v1/chat/completions", json=chat_body(metadata=meta("r1", 1)))
    assert (r.status_code, r.json()["limit"], r.json()["field"]) == (status, limit, field)
    assert r.json()["detail"].startswith(f"{field}: ")
    assert (log[-1]["status"], log[-1]["detail"]) == (status, r.json()["detail"])
    assert ok.status_code == 200


def test_limit_details_state_the_number_and_the_cap():
    with client_for(ServerSettings(seed=7, script=SCRIPT)) as c:
        digits = c.post("/v1/chat/completions", content=BAD_MODEL_BODIES[0][2], headers={"content-type": "application/json"})
        prompt = c.post("/tokenize", json={"prompt": "é" * 20_000})
    assert digits.json()["detail"] == "max_tokens: integer has 5000 digits; the limit is 20"
    assert prompt.json() == {
        "detail": "prompt: the prompt's text is 40000 UTF-8 bytes, so it renders to at least 40000 tokens; the limit is 32768",
        "limit": "max_prompt_tokens", "field": "prompt"}


@pytest.mark.parametrize(("field", "value", "loc"), [
    ("temperature", 2.5, ["body", "temperature"]),
    ("temperature", -0.1, ["body", "temperature"]),
    ("max_tokens", 2**31, ["body", "max_tokens"]),
    ("required_prefix_token_ids", [-1], ["body", "required_prefix_token_ids", 0]),
])
def test_numeric_fields_are_bounded_by_the_schema(field, value, loc):
    with client_for(ServerSettings(seed=7, script=SCRIPT)) as c:
        r = c.post("/v1/chat/completions", json=chat_body(**{field: value}))
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == loc


def test_bodies_at_the_limits_are_still_served():
    """The caps refuse only what is over them: depth 64, 20-digit ints, a prompt of exactly the cap."""
    settings = ServerSettings(seed=7, script=SCRIPT, limits=Limits(max_prompt_tokens=64))
    nested = '{"a":' * 62 + "-" + "9" * 20 + "}" * 62  # body, metadata, 62 objects: 64 levels
    raw = _raw('{"input":"hi","metadata":{"b":' + nested + "}}")
    with client_for(settings) as c:
        deep = c.post("/v1/responses", content=raw, headers={"content-type": "application/json"})
        tok = c.post("/tokenize", json={"prompt": "a" * 64})
        over = c.post("/tokenize", json={"prompt": "a" * 65})
    assert deep.status_code == 200, deep.text
    assert (tok.status_code, tok.json()["count"]) == (200, 64)
    assert (over.status_code, over.json()["limit"]) == (422, "max_prompt_tokens")


@pytest.mark.parametrize("raw", [b"\xff\xfe{garbage", b'{"messages":[' + b"1" * 5000 + b",]}", b"[" + b"1" * 5000 + b"]x"],
                         ids=["not UTF-8", "a 5000-digit integer before the syntax error", "trailing garbage"])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses", "/tokenize"])
def test_malformed_json_keeps_the_fastapi_shaped_422(raw, path):
    """An integer too long for `int()` ahead of the syntax error used to escape the pipeline's JSON parse as a 500."""
    with client_for(ServerSettings(seed=7, script=SCRIPT)) as c:
        r = c.post(path, content=raw, headers={"content-type": "application/json"})
        log = c.get("/request_log").json()["entries"]
    assert r.status_code == 422
    assert r.json()["detail"][0]["type"] == "json_invalid"
    assert [e["status"] for e in log] == [422]


def _empty_messages(n: int) -> list[dict]:
    return [{"role": "user", "content": ""} for _ in range(n)]


@pytest.mark.parametrize(("path", "body", "field"), [
    ("/v1/chat/completions", chat_body(_empty_messages(12)), "messages"),
    ("/v1/responses", {"input": [{"type": "message", "role": "user", "content": ""} for _ in range(12)]}, "input"),
    ("/tokenize", {"messages": _empty_messages(12)}, "messages"),
])
def test_a_prompt_that_renders_over_max_prompt_tokens_names_the_limit_on_every_endpoint(path, body, field):
    """No text at all (the byte pre-check passes) but 12 turns of chat-template tokens: /tokenize used to count it
    (200) where chat and responses refused it, and their refusal named no limit."""
    with client_for(ServerSettings(seed=7, script=SCRIPT, limits=Limits(max_prompt_tokens=16))) as c:
        r = c.post(path, json=body)
    assert (r.status_code, r.json()["limit"], r.json()["field"]) == (422, "max_prompt_tokens", field)
    assert r.json()["detail"].startswith(f"{field}: the prompt renders to ") and r.json()["detail"].endswith("; the limit is 16")


def test_too_many_images_names_max_images():
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    with client_for(ServerSettings(seed=7, script=SCRIPT, limits=Limits(max_images=2))) as c:
        r = c.post("/v1/chat/completions", json=chat_body([{"role": "user", "content": [image] * 3}]))
    assert r.status_code == 422
    assert r.json() == {"detail": "messages: the prompt has 3 images; the limit is 2", "limit": "max_images",
                        "field": "messages"}


def test_prompt_text_bytes_is_a_lower_bound_of_the_rendered_length():
    body = {"input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "héllo"}]},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "abc"}], "content": [{"type": "reasoning_text", "text": "x" * 99}]},
        {"type": "function_call", "name": "click", "arguments": "{}", "call_id": "c1"},
        {"type": "function_call_output", "call_id": "c1", "output": "done"},
    ], "instructions": "be brief", "metadata": {"text": "not rendered" * 40}}
    with client_for(ServerSettings(seed=7, script=SCRIPT)) as c:
        count = c.post("/tokenize", json=body).json()["count"]
    assert prompt_text_bytes(body, "responses") == (6 + 3 + 2 + 4 + 8, "instructions")
    assert count >= 23


def test_load_json_reports_the_first_problem_in_document_order():
    with pytest.raises(LimitExceeded) as info:
        load_json(b'{"a":[1,NaN],"b":' + b"1" * 30 + b"}", JsonLimits())
    assert (info.value.limit, info.value.field) == ("finite_numbers", "a[1]")
    assert load_json(b'{"a":[1,2.5,-3],"b":"x"}', JsonLimits()) == {"a": [1, 2.5, -3], "b": "x"}


BAD_VERIFY_BODIES = [
    ("5000-digit rollout_index", _raw('{"response":{},"rollout_index":' + "9" * 5000 + "}"), "max_int_digits", "rollout_index"),
    ("100k nested brackets", _raw('{"response":{"x":' + "[" * 100_000 + "]" * 100_000 + "}}"), "max_json_depth", "body"),
    ("Infinity logprob", _raw('{"response":{"output":[{"generation_log_probs":[-Infinity]}]}}'), "finite_numbers",
     "response.output[0].generation_log_probs[0]"),
    ("not JSON", b"\x00\xff", "json_syntax", "body"),
]


@pytest.mark.parametrize(("name", "raw", "limit", "field"), BAD_VERIFY_BODIES, ids=[r[0] for r in BAD_VERIFY_BODIES])
def test_reward_server_answers_bad_input_with_a_typed_422(name, raw, limit, field):
    with TestClient(create_reward_app(RewardSettings()), raise_server_exceptions=False) as c:
        r = c.post("/verify", content=raw, headers={"content-type": "application/json"})
        ok = c.post("/verify", json={"response": {}, "rollout_index": 3})
    assert (r.status_code, r.json()["limit"], r.json()["field"]) == (422, limit, field)
    assert (ok.status_code, ok.json()["reward"], ok.json()["rollout_index"]) == (200, 1.0, 3)


def test_reward_server_streamed_body_over_the_cap_gets_413():
    def chunks():
        for _ in range(3):
            yield b" " * 1024

    with TestClient(create_reward_app(RewardSettings(max_body_bytes=2048))) as c:
        r = c.post("/verify", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert (r.json()["limit"], r.json()["field"]) == ("max_body_bytes", "body")


_ODD_VALUES = [None, True, -1, 0, 2**63, 1.5, "", "x" * 600, "\u00b2", "-1", "99999999999999999999", [], {}, [[[]]],
               {"a": {"b": {}}}, "data:image/png;base64,AAAA", "file:///etc/passwd", "<think>", {"type": "input_image"},
               {"role": "assistant"}, {"url": 5}, {"type": "image_url", "image_url": {"url": []}}]
_ODD_KEYS = ["messages", "input", "metadata", "compactsim_turn", "compactsim_attempt", "compactsim_rollout_id", "role",
             "content", "type", "text", "image_url", "url", "max_tokens", "top_logprobs", "required_prefix_token_ids",
             "instructions", "temperature", "top_p", "stream", "arguments", "name", "output", "summary", "detail"]


def _mutated(rng, body):
    """`body` with one to three values replaced, added or removed at random paths."""
    import copy

    body = copy.deepcopy(body)
    for _ in range(rng.randint(1, 3)):
        paths, stack = [], [(body, ())]
        while stack:
            node, path = stack.pop()
            items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
            for k, v in items:
                paths.append((node, k))
                stack.append((v, (*path, k)))
        if not paths:
            break
        parent, key = rng.choice(paths)
        roll = rng.random()
        if roll < 0.6:
            parent[key] = copy.deepcopy(rng.choice(_ODD_VALUES))
        elif roll < 0.8 and isinstance(parent, dict):
            parent[rng.choice(_ODD_KEYS)] = copy.deepcopy(rng.choice(_ODD_VALUES))
        elif isinstance(parent, dict):
            parent.pop(key)
    return body


def test_mutated_bodies_never_get_a_5xx():
    """600 seeded mutations of valid bodies on every JSON endpoint: 4xx or 200, never a server error."""
    import random

    from tests.unit.mock_servers.model_server.server_builders import user_items

    rng = random.Random(15)
    bases = [("/v1/chat/completions", chat_body(metadata=meta("r1", 2))),
             ("/v1/responses", {"input": user_items(), "metadata": meta("r1", 1), "max_output_tokens": 50}),
             ("/tokenize", {"input": user_items()}), ("/tokenize", {"messages": [{"role": "user", "content": "hi"}]})]
    statuses: dict[int, int] = {}
    with client_for(ServerSettings(seed=7, script=SCRIPT)) as c:
        for _ in range(600):
            path, base = rng.choice(bases)
            r = c.post(path, content=json.dumps(_mutated(rng, base)).encode(), headers={"content-type": "application/json"})
            assert r.status_code < 500, (path, r.text)
            statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
    assert set(statuses) <= {200, 400, 413, 422} and statuses[200] > 50 and statuses[422] > 300


@pytest.mark.parametrize(
    ("raw", "limits", "limit"),
    [
        ('{"a": 1e999}'.encode("utf-16-le"), JsonLimits(), "finite_numbers"),
        ('{"a": 1111111111111111111111111}'.encode("utf-16"), JsonLimits(), "max_int_digits"),
        (('{"a": ' + "7" * 5000 + "}").encode("utf-32"), JsonLimits(), "max_int_digits"),
        (b"[1" + b"0" * 350 + b".0]", JsonLimits(max_int_digits=400), "finite_numbers"),
        (b"[1" + b"0" * 250 + b"e99]", JsonLimits(max_int_digits=400), "finite_numbers"),
        (b'{"x": "132319e473d8", "y": -2E400}', JsonLimits(), "finite_numbers"),
    ],
    ids=["utf16-inf", "utf16-long-int", "utf32-5000-digits", "long-mantissa-high-cap", "mantissa-and-exponent", "hex-then-inf"],
)
def test_the_hook_free_decode_never_lets_an_unsafe_number_through(raw, limits, limit):
    """Bodies the fast path must not take (other encodings, long digit runs, big exponents) still get typed errors."""
    with pytest.raises(LimitExceeded) as info:
        load_json(raw, limits)
    assert info.value.limit == limit


def test_the_hook_free_decode_reads_the_same_values():
    raw = b'{"ids": [1, 20, 300], "lp": [-0.5, -1.25e-5, 1.5E+12], "s": "9e2631", "big": 12345678901234567890}'
    assert load_json(raw, JsonLimits()) == json.loads(raw)


@pytest.mark.parametrize(
    ("raw", "limit", "field"),
    [
        (b'{"a": [NaN]}', "finite_numbers", "a[0]"),
        (b'{"s": "NaN and Infinity are words here", "b": -Infinity}', "finite_numbers", "b"),
        (b'{"s": "\\ud800"}', "unicode_text", "s"),
        (b'{"ok": "\\ud83d\\ude00", "bad": ["\\udfff"]}', "unicode_text", "bad[0]"),
        ('{"s": "x"}'.encode().replace(b"x", b"\xed\xa0\x80"), "unicode_text", "s"),
        (b'{"s": "]]]]]]]]", "d": ' + b"[" * 65 + b"]" * 65 + b"}", "max_json_depth", "d" + "[0]" * 63),
    ],
    ids=["nan", "inf-after-words", "lone-escape", "paired-then-lone", "utf8-surrogate-bytes", "depth-behind-brackets-in-strings"],
)
def test_the_byte_proof_never_hides_a_problem(raw, limit, field):
    """Bodies decoded without hooks skip the tree walk only when their bytes prove it would pass."""
    with pytest.raises(LimitExceeded) as info:
        load_json(raw, JsonLimits())
    assert (info.value.limit, info.value.field) == (limit, field)


def test_the_byte_proof_passes_deep_but_allowed_bodies_and_brackets_in_strings():
    raw = b'{"s": "[[[[{{{{", "d": ' + b"[" * 63 + b"]" * 63 + b"}"  # depth 64 = the limit
    assert load_json(raw, JsonLimits()) == json.loads(raw)


_json_leaves = st.one_of(
    st.integers(-10**6, 10**6), st.floats(allow_nan=False, allow_infinity=False), st.booleans(), st.none(),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)) | st.sampled_from("[]{}\"\\"), max_size=6),
    st.sampled_from(["\ud800", "\udfff", "\ud83d\ude00", "NaN", "]]", "{{"]),
    st.sampled_from([math.nan, math.inf, -math.inf]),
)
_json_trees = st.recursive(_json_leaves, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=3), kids, max_size=4),
                           max_leaves=40)


@hypothesis_settings(max_examples=400, deadline=None)
@given(_json_trees, st.integers(1, 8), st.booleans())
def test_the_byte_proof_agrees_with_the_tree_walk(tree, max_depth, ascii_only):
    """Whatever the body, `load_json` fails exactly when the full walk of its decode fails, with the same field."""
    raw = json.dumps(tree, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    limits = JsonLimits(max_depth=max_depth)
    try:
        check_tree(json.loads(raw, parse_constant=lambda c: _NonFinite(c)), limits)
        walk = None
    except LimitExceeded as exc:
        walk = (exc.limit, exc.field)
    try:
        load_json(raw, limits)
        got = None
    except LimitExceeded as exc:
        got = (exc.limit, exc.field)
    assert got == walk


@pytest.mark.parametrize("raw", [b'"' + b'\\"' * 200_000, b'["' + b'"\\' * 200_000 + b"]", b'{"a": "x\\',
                                 b'"' + b'\\"' * 200_000 + b"\\"],
                         ids=["escaped-quotes-unclosed", "alternating-quotes-and-backslashes", "trailing-backslash",
                              "escaped-quotes-then-a-lone-backslash"])
@pytest.mark.timeout(60)
def test_unclosed_strings_get_a_syntax_error_without_a_quadratic_scan(raw):
    """400 KB bodies: a quadratic scan would take hours (the timeout fails it), a linear one milliseconds."""
    with pytest.raises(LimitExceeded) as info:
        load_json(raw, JsonLimits())
    assert info.value.limit == "json_syntax"
