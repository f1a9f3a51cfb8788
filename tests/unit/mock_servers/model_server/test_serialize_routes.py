"""The vectorised routes encoder, the logprobs fragment and the spliced `serialize.dumps` are byte-identical to
json.dumps of plain lists."""

from __future__ import annotations

import base64
import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from compactsim.harness.core import tokenizer as tok
from compactsim.harness.core.chat_template import ParsedCompletion, ToolCall
from compactsim.mock_servers.model_server import serialize
from compactsim.mock_servers.model_server.engine import CallKey, Generation
from compactsim.mock_servers.model_server.sampling import placeholder_row, scripted_routes

SLOT0 = serialize._SLOT.format(0)


def reference_list_json(a: np.ndarray) -> bytes:
    return json.dumps(a.tolist(), separators=(",", ":")).encode()


def reference_content(ids: tuple, logprobs: tuple, top: tuple, as_ids: bool) -> list[dict[str, Any]]:
    """vLLM's ``logprobs.content`` built as dicts, the way the serializer did before its fragment."""
    def name(t: int) -> str:
        return f"token_id:{t}" if as_ids else tok.token_repr(t)

    def raw(t: int) -> list[int]:
        return list(tok.SPECIAL_TOKENS[t].encode("utf-8")) if tok.is_special(t) else [t - tok.BYTE_OFFSET]

    return [{"token": name(t), "logprob": lp, "bytes": raw(t),
             "top_logprobs": [{"token": name(j), "logprob": v, "bytes": raw(j)} for j, v in (top[i] if i < len(top) else ())]}
            for i, (t, lp) in enumerate(zip(ids, logprobs))]


def _plain(obj: Any) -> Any:
    if isinstance(obj, serialize.ArrayJSON):
        return obj.array.tolist()
    if isinstance(obj, serialize.LogprobsJSON):
        return reference_content(obj.ids, obj.logprobs, obj.top, obj.as_ids)
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


def reference_dumps(obj: Any) -> bytes:
    """The serializer before the fast path: routes as lists, same fallback to ensure_ascii."""
    obj = _plain(obj)
    try:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(obj, ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode("ascii")


# ------------------------------------------------------------------ the array encoder

INT_DTYPES = st.sampled_from([np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64])
SHAPES = hnp.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=6)


@st.composite
def int_arrays(draw: st.DrawFn) -> np.ndarray:
    dtype = np.dtype(draw(INT_DTYPES))
    info = np.iinfo(dtype)
    lo, hi = draw(st.sampled_from([(0, 9), (0, 127), (0, 1000), (-5, 9), (int(info.min), int(info.max))]))
    lo, hi = max(lo, int(info.min)), min(hi, int(info.max))
    return draw(hnp.arrays(dtype, draw(SHAPES), elements=st.integers(lo, hi)))


@settings(max_examples=400, deadline=None)
@given(int_arrays())
def test_int_array_json_matches_tolist_json(a: np.ndarray) -> None:
    assert serialize.int_array_json(a) == reference_list_json(a)


@settings(max_examples=100, deadline=None)
@given(int_arrays())
def test_int_array_json_on_non_contiguous_views(a: np.ndarray) -> None:
    view = a[::-1] if a.ndim == 1 else np.swapaxes(a, 0, -1)[::2]
    assert serialize.int_array_json(view) == reference_list_json(view)


@pytest.mark.parametrize("a", [
    np.array([[[1, 2]], [[3, -4]]]),  # negative
    np.zeros((0, 2, 2), dtype=np.int64),  # zero rows
    np.zeros((3, 0, 2), dtype=np.int64),  # zero-size inner dim
    np.array(5, dtype=np.int64),  # 0-d
    np.array([[True, False]]),  # bool -> true/false
    np.array([[0.5, 1.0]]),  # float
    np.array([2**64 - 1], dtype=np.uint64),  # beyond the int64 digit arithmetic
    np.array([10**18], dtype=np.int64),
])
def test_fallback_cases_are_exact(a: np.ndarray) -> None:
    assert serialize._fast_int_array_json(a) is None
    assert serialize.int_array_json(a) == reference_list_json(a)


@pytest.mark.parametrize("hi", [1, 9, 10, 99, 100, 127, 10**17, 10**18 - 1])
def test_digit_width_boundaries(hi: int) -> None:
    a = np.array([[[0, hi]], [[hi // 10, hi - 1 if hi else 0]], [[9, 10 if hi >= 10 else 1]]], dtype=np.int64)
    assert serialize._fast_int_array_json(a) is not None
    assert serialize.int_array_json(a) == reference_list_json(a)


def test_scripted_routes_take_the_fast_path() -> None:
    for experts in (2, 4, 16, 127):
        r = scripted_routes(7, "rollout", 1, 800, 2, experts, 2)
        r[-1] = placeholder_row(2, 2)
        fast = serialize._fast_int_array_json(r)
        assert fast is not None and fast == reference_list_json(r)


# ------------------------------------------------------------------ whole bodies

TRICKY = [
    SLOT0, serialize._SLOT.format(1), f'"{SLOT0}"', json.dumps(SLOT0), json.dumps(SLOT0)[1:-1], "compactsim.array_json.0",
    '"', "\\", '\\"', "\\u0000", "\x00", "é ünïcödé 漢字 🙂", "\ud800", "\udfff", "a\udc80b", "]]]", "[[0,1]]", "",
]
TEXT = st.one_of(
    st.sampled_from(TRICKY),
    st.lists(st.sampled_from(TRICKY), max_size=4).map("".join),
    st.text(st.characters(blacklist_categories=()), max_size=12),  # includes lone surrogates
)


def _generation(rows: int, routes: np.ndarray | None, *, content: str | None, reasoning: str | None, tool_name: str,
                arguments: str, finish: str = "stop") -> Generation:
    calls = (ToolCall(name=tool_name, arguments=arguments, call_id="call_1"),) if tool_name else ()
    items: list[dict[str, Any]] = []
    if reasoning is not None:
        items.append({"type": "reasoning", "id": "rs_0", "summary": [{"type": "summary_text", "text": reasoning}]})
    if content is not None:
        items.append({"type": "message", "id": "msg_0", "role": "assistant", "status": "completed",
                      "content": [{"type": "output_text", "text": content, "annotations": []}]})
    for c in calls:
        items.append({"type": "function_call", "id": "fc_0", "call_id": c.call_id, "name": c.name, "arguments": c.arguments})
    parsed = ParsedCompletion(items=tuple(items), reasoning=reasoning, content=content, tool_calls=calls, stopped=True)
    g = 3
    return Generation(prompt_ids=tuple(range(rows - g)), sampled_ids=tuple(range(100, 100 + g)), logprobs=(-0.25, -1.5, -0.0),
                      top_logprobs=(((101, -0.25), (2, -2.0)),) * g, routes=routes, finish_reason=finish, parsed=parsed,
                      policy_version=2, key=CallKey(rollout_id="r", turn=1, from_metadata=True), media_ids=())


def _bodies(gen: Generation, model: str) -> list[dict[str, Any]]:
    return [
        serialize.chat_completion(gen, model=model, request_digest="ab" * 32, want_logprobs=True, as_ids=False, return_token_ids=True),
        serialize.chat_completion(gen, model=model, request_digest="ab" * 32, want_logprobs=False, as_ids=True, return_token_ids=False),
        serialize.responses_body(gen, model=model, request_digest="ab" * 32, tools=[{"type": "function", "name": model}]),
    ]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.integers(4, 40), experts=st.sampled_from([2, 4, 12, 127]), content=st.none() | TEXT,
       reasoning=st.none() | TEXT, tool_name=TEXT, arguments=TEXT, model=TEXT,
       finish=st.sampled_from(["stop", "length"]), with_routes=st.booleans())
def test_bodies_are_byte_identical_to_plain_lists(rows: int, experts: int, content: str | None, reasoning: str | None,
                                                  tool_name: str, arguments: str, model: str, finish: str,
                                                  with_routes: bool) -> None:
    routes = scripted_routes(5, "r", 1, rows, 2, experts, 2) if with_routes else None
    gen = _generation(rows, routes, content=content, reasoning=reasoning, tool_name=tool_name, arguments=arguments,
                      finish=finish)
    for body in _bodies(gen, model):
        assert serialize.dumps(body) == reference_dumps(body)


@pytest.mark.parametrize("text", TRICKY)
def test_placeholder_lookalikes_in_every_text_field(text: str) -> None:
    gen = _generation(800, scripted_routes(5, "r", 1, 800, 2, 4, 2), content=text, reasoning=text, tool_name=text,
                      arguments=text)
    for body in _bodies(gen, text):
        body[text] = text  # also as a key
        got = serialize.dumps(body)
        assert got == reference_dumps(body)
        assert json.loads(got)["choices" if "choices" in body else "output"]  # still valid JSON


def test_routes_land_where_the_lists_did() -> None:
    routes = scripted_routes(5, "r", 1, 30, 2, 4, 2)
    gen = _generation(30, routes, content="hi", reasoning=None, tool_name="", arguments="")
    chat, _, resp = _bodies(gen, "m")
    assert json.loads(serialize.dumps(chat))["choices"][0]["message"]["routed_experts"] == routes.tolist()
    assert list(json.loads(serialize.dumps(chat))["choices"][0]["message"])[-1] == "routed_experts"
    assert json.loads(serialize.dumps(resp))["output"][-1]["routed_experts"] == routes.tolist()


def test_several_fragments_and_shared_wrappers() -> None:
    a = serialize.ArrayJSON(np.arange(12).reshape(3, 2, 2) % 7)
    b = serialize.ArrayJSON(np.arange(6).reshape(6, 1, 1) * 31)
    obj = {"x": [a, b, a], "y": {"z": b, "s": SLOT0}, "t": "\ud800"}
    assert serialize.dumps(obj) == reference_dumps(obj)
    obj2 = {"x": [a, b, a], "y": {"z": b, "s": "ok"}}
    assert serialize.dumps(obj2) == reference_dumps(obj2)


def test_errors_unchanged() -> None:
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        serialize.dumps({"a": serialize.ArrayJSON(np.arange(4).reshape(2, 2, 1)), "b": math.nan})
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        serialize.dumps({"a": serialize.ArrayJSON(np.array([[[math.inf]]]))})
    with pytest.raises(TypeError, match="Object of type ndarray is not JSON serializable"):
        serialize.dumps({"a": np.arange(3)})
    with pytest.raises(TypeError, match="Object of type object is not JSON serializable"):
        serialize.dumps({"a": serialize.ArrayJSON(np.arange(4).reshape(2, 2, 1)), "b": object()})


def test_fast_path_taken_and_collisions_fall_back(monkeypatch: pytest.MonkeyPatch) -> None:
    results: list[bool] = []
    splice = serialize._splice

    def spy(data: bytes, fragments: list[bytes]) -> bytes | None:
        out = splice(data, fragments)
        results.append(out is not None)
        return out

    monkeypatch.setattr(serialize, "_splice", spy)
    gen = _generation(50, scripted_routes(5, "r", 1, 50, 2, 4, 2), content="x", reasoning="y", tool_name="t", arguments="{}")
    for body in _bodies(gen, "m"):
        assert serialize.dumps(body) == reference_dumps(body)
    assert results == [True, True, True]
    results.clear()
    for body in _bodies(gen, SLOT0):  # the model name is the placeholder: spliced nowhere, plain lists instead
        assert serialize.dumps(body) == reference_dumps(body)
    assert results == [False, False, False]


# ------------------------------------------------------------------ the logprobs fragment

TOKEN_IDS = st.integers(0, tok.VOCAB_SIZE - 1)
LOGPROBS = st.one_of(st.floats(max_value=0.0), st.floats(allow_nan=True, allow_infinity=True),
                     st.sampled_from([-0.0, 0.0, -1e-7, -5e-324, -1e16, -1e300, -2.5, -(2.0**53) - 2.0]))


@st.composite
def logprob_contents(draw: st.DrawFn) -> tuple[tuple, tuple, tuple]:
    n = draw(st.integers(0, 12))
    ids = tuple(draw(st.lists(TOKEN_IDS, min_size=n, max_size=n)))
    lps = tuple(draw(st.lists(LOGPROBS, min_size=n, max_size=n)))
    top = tuple(tuple(draw(st.lists(st.tuples(TOKEN_IDS, LOGPROBS), max_size=3))) for _ in range(draw(st.integers(0, n))))
    return ids, lps, top


@settings(max_examples=600, deadline=None)
@given(content=logprob_contents(), as_ids=st.booleans(), text=TEXT)
def test_logprobs_fragment_is_byte_identical_or_fails_alike(content: tuple, as_ids: bool, text: str) -> None:
    ids, lps, top = content
    body = {"m": text, "logprobs": {"content": serialize.LogprobsJSON(ids, lps, top, as_ids)}, "n": [1.5, None]}
    try:
        expected: bytes | Exception = reference_dumps(body)
    except ValueError as exc:  # NaN or infinity: refused either way, with json's own message
        expected = exc
    if isinstance(expected, Exception):
        with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
            serialize.dumps(body)
    else:
        assert serialize.dumps(body) == expected


def test_logprobs_fragment_covers_every_token_name() -> None:
    ids = tuple(range(tok.VOCAB_SIZE))
    lps = tuple(-(i + 1) / 7 for i in ids)
    top = tuple(((j, -0.5), (tok.VOCAB_SIZE - 1 - j, -1e-9)) for j in ids)
    for as_ids in (True, False):
        frag = serialize.LogprobsJSON(ids, lps, top, as_ids)
        assert frag.fast_bytes is not None
        assert frag.fast_bytes == json.dumps(reference_content(ids, lps, top, as_ids), separators=(",", ":")).encode()
        assert frag.plain() == reference_content(ids, lps, top, as_ids)


@pytest.mark.parametrize("lps", [(-0.5, math.nan), (math.inf,), (-1, -0.5), (np.float64(-0.5),), (True,)])
def test_logprobs_fragment_leaves_other_values_to_json(lps: tuple) -> None:
    frag = serialize.LogprobsJSON(tuple(range(10, 10 + len(lps))), lps, (), True)
    assert frag.fast_bytes is None
    body = {"content": frag}
    if all(isinstance(v, (int, float)) and math.isfinite(v) for v in lps):
        assert serialize.dumps(body) == reference_dumps(body)
    else:
        with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
            serialize.dumps(body)


def test_logprobs_fragment_in_a_chat_body_takes_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    counts: list[int] = []
    splice = serialize._splice

    def spy(data: bytes, fragments: list[bytes]) -> bytes | None:
        counts.append(len(fragments))
        return splice(data, fragments)

    monkeypatch.setattr(serialize, "_splice", spy)
    gen = _generation(20, scripted_routes(5, "r", 1, 20, 2, 4, 2), content="x", reasoning=None, tool_name="", arguments="")
    body = serialize.chat_completion(gen, model="m", request_digest="ab" * 32, want_logprobs=True, as_ids=True,
                                     return_token_ids=True)
    got = serialize.dumps(body)
    assert counts == [2]  # the routes and the logprobs, both spliced
    assert got == reference_dumps(body)
    assert json.loads(got)["choices"][0]["logprobs"]["content"][1] == {
        "token": "token_id:101", "logprob": -1.5, "bytes": [101 - tok.BYTE_OFFSET],
        "top_logprobs": [{"token": "token_id:101", "logprob": -0.25, "bytes": [101 - tok.BYTE_OFFSET]},
                         {"token": "token_id:2", "logprob": -2.0, "bytes": list(tok.SPECIAL_TOKENS[2].encode())}]}


def test_an_id_equal_to_an_int_but_not_one_is_not_served_the_ints_cached_entry() -> None:
    serialize.LogprobsJSON((1,), (-0.5,), (), True).fast_bytes  # caches the entry of id 1
    for odd in (True, np.int64(1)):
        frag = serialize.LogprobsJSON((odd,), (-0.5,), (), True)
        assert frag.fast_bytes is None
        assert serialize.dumps({"c": frag}) == reference_dumps({"c": frag})


def test_the_nrlre1_envelope_is_the_header_and_the_little_endian_int16_bytes_token_major():
    routes = np.array([[[0, 1], [2, 3], [1, 0]], [[3, 2], [0, 1], [-1, -1]]], dtype=np.int64)  # S=2, L=3, K=2
    text = serialize.routes_envelope(routes)
    head, _, body = text.rpartition(":")
    assert head == "nrlre1:int16:2x3x2"
    assert base64.b64decode(body) == b"".join(int(v).to_bytes(2, "little", signed=True) for v in routes.ravel())


@given(hnp.arrays(np.int64, hnp.array_shapes(min_dims=3, max_dims=3, min_side=1, max_side=6),
                  elements=st.integers(-1, 126)))
def test_an_envelope_decodes_back_to_its_routes_through_the_planners_decoder(routes: np.ndarray):
    from compactsim.harness.pipeline import ingest

    violations: list = []
    decoded = ingest._decode_route_envelope(serialize.routes_envelope(routes), 1, violations)
    assert violations == [] and np.array_equal(decoded, routes)
