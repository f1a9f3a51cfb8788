"""The chat template: exact rendering, the append property, the drift modes that break it, parsing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compactsim.harness.core import chat_template as ct
from compactsim.harness.core import tokenizer as tok
from compactsim.harness.core.digests import canonical_digest
from compactsim.harness.core.errors import ConfigError

T = tok.encode_text
URL = "data:image/png;base64,AAAA"


def _conversation() -> list[dict]:
    return [
        {"type": "message", "role": "system", "content": "sys"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"},
                                                         {"type": "input_image", "image_url": URL, "detail": "auto"}]},
    ]


def test_render_prompt_gives_exact_ids():
    r = ct.render_prompt(_conversation())
    assert list(r.token_ids) == [
        tok.BOS,
        tok.TURN_START, tok.ROLE_SYSTEM, *T("sys"), tok.TURN_END,
        tok.TURN_START, tok.ROLE_USER, *T("go"), *[tok.IMAGE] * 4, tok.TURN_END,
        tok.TURN_START, tok.ROLE_ASSISTANT,
    ]


def test_images_are_listed_in_prompt_order_with_gym_media_ids():
    items = _conversation() + [{"type": "function_call_output", "call_id": "c", "output": [
        {"type": "input_image", "image_url": URL + "B"}]}]
    r = ct.render(items)
    assert [im.image_url for im in r.images] == [URL, URL + "B"]
    part = {"type": "input_image", "image_url": URL, "detail": "auto"}
    assert r.media_ids[0] == "media-" + canonical_digest(part)[:24]
    assert r.token_ids.count(tok.IMAGE) == 8


def test_instructions_render_as_a_leading_system_message():
    with_instr = ct.render_prompt("hi", instructions="sys")
    explicit = ct.render_prompt([{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}])
    assert with_instr == explicit


def test_encode_action_orders_reasoning_text_calls_then_stop():
    a = ct.AssistantAction(reasoning="r", text="t", tool_calls=(ct.ToolCall("f", "{}"),))
    assert ct.encode_action(a) == [tok.THINK_START, *T("r"), tok.THINK_END, *T("t"),
                                   tok.TOOL_CALL_START, *T("f"), tok.TOOL_ARGS, *T("{}"), tok.TOOL_CALL_END, tok.TURN_END]


def test_parse_completion_builds_responses_items():
    a = ct.AssistantAction(reasoning="think", text="hello", tool_calls=(ct.ToolCall("click", '{"x":1}'),))
    p = ct.parse_completion(ct.encode_action(a), item_id="abc")
    assert p.items == (
        {"type": "reasoning", "id": "rs_abc_0", "summary": [{"type": "summary_text", "text": "think"}]},
        {"type": "message", "id": "msg_abc_1", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "hello", "annotations": []}]},
        {"type": "function_call", "id": "fc_abc_2", "call_id": "call_abc_2", "name": "click", "arguments": '{"x":1}',
         "status": "completed"},
    )
    assert (p.reasoning, p.content, p.stopped) == ("think", "hello", True)
    assert p.tool_calls == (ct.ToolCall("click", '{"x":1}', "call_abc_2"),)


def test_parse_completion_closes_a_block_cut_by_the_token_budget():
    ids = [tok.THINK_START, *T("ab")]
    p = ct.parse_completion(ids)
    assert p.stopped is False
    assert p.items[0]["summary"][0]["text"] == "ab"


def test_parse_completion_rejects_ids_after_the_stop_token():
    with pytest.raises(ConfigError) as err:
        ct.parse_completion([*T("a"), tok.TURN_END, *T("b")])
    assert err.value.code == "invalid_argument"
    assert "ids[2]: 1 id(s) after the stop token" in str(err.value)


def test_parse_completion_rejects_a_turn_opener():
    with pytest.raises(ConfigError) as err:
        ct.parse_completion([*T("a"), tok.TURN_START])
    assert "ids[1]: unexpected <|turn_start|>" in str(err.value)


def test_render_errors_name_the_offending_path():
    with pytest.raises(ConfigError) as err:
        ct.render([{"role": "user", "content": [{"type": "input_audio"}]}])
    assert err.value.code == "invalid_argument"
    assert str(err.value).startswith("invalid_argument: input[0].content[0].type: unsupported content part type 'input_audio'")
    with pytest.raises(ConfigError) as err:
        ct.render_chat([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 3}}]}])
    assert "messages[0].tool_calls[0].function.arguments: expected a JSON string" in str(err.value)
    with pytest.raises(ConfigError) as err:
        ct.render([{"type": "item_reference", "id": "x"}])
    assert "input[0].type: unsupported item type 'item_reference'" in str(err.value)


@pytest.mark.parametrize("calls", [1, 0.5, True, "click", {"function": {"name": "f", "arguments": "{}"}}])
def test_tool_calls_that_are_not_a_list_are_refused_naming_the_field(calls):
    """Found by fuzzing the server: a truthy scalar there was iterated (TypeError, a 500); a string or
    an object was read character by character or key by key."""
    with pytest.raises(ConfigError) as err:
        ct.render_chat([{"role": "user", "content": "go"}, {"role": "assistant", "content": "ok", "tool_calls": calls}])
    assert f"messages[1].tool_calls: expected a list of tool calls, found {type(calls).__name__}" in str(err.value)


def test_tool_calls_null_or_empty_render_as_none():
    plain = ct.render_chat([{"role": "assistant", "content": "ok"}])
    assert ct.render_chat([{"role": "assistant", "content": "ok", "tool_calls": None}]) == plain
    assert ct.render_chat([{"role": "assistant", "content": "ok", "tool_calls": []}]) == plain


def test_unknown_drift_mode_is_rejected():
    with pytest.raises(ConfigError) as err:
        ct.render("hi", drift="bogus")  # type: ignore[arg-type]
    assert "drift='bogus'" in str(err.value)


def test_render_chat_equals_render_of_equivalent_items():
    items = _conversation() + [
        {"type": "reasoning", "id": "r", "summary": [{"type": "summary_text", "text": "hm"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "out"},
    ]
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": [{"type": "text", "text": "go"},
                                     {"type": "image_url", "image_url": {"url": URL, "detail": "auto"}}]},
        {"role": "assistant", "content": "ok", "reasoning_content": "hm",
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "out"},
    ]
    assert ct.render_chat(messages) == ct.render_prompt(items)
    literal = [*messages[:2], {**messages[2], "reasoning_content": None, "content": "<think>hm</think>ok"}, messages[3]]
    literal[2].pop("reasoning_content")
    assert ct.render_chat(literal) == ct.render_prompt(items)


# --------------------------------------------------------------------------- append property

_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=10)


@st.composite
def _actions(draw) -> ct.AssistantAction:
    reasoning = draw(st.none() | _TEXT)
    text = draw(st.none() | _TEXT)
    calls = tuple(draw(st.lists(st.builds(ct.ToolCall, name=_TEXT.filter(bool), arguments=_TEXT), max_size=2)))
    if reasoning is None and not text and not calls:
        text = "x"
    return ct.AssistantAction(reasoning=reasoning, text=text, tool_calls=calls)


_OBSERVATION = st.one_of(
    st.builds(lambda s: {"type": "function_call_output", "call_id": "c", "output": s}, _TEXT),
    st.builds(lambda s: {"type": "message", "role": "user", "content": [{"type": "input_text", "text": s},
                                                                      {"type": "input_image", "image_url": URL}]}, _TEXT),
)


@st.composite
def _rollouts(draw):
    """A conversation driven by 1-4 model calls; each call's sampled ids may be cut by a token budget."""
    calls = []
    for _ in range(draw(st.integers(1, 4))):
        sampled = ct.encode_action(draw(_actions()))
        cut = draw(st.integers(1, len(sampled)))
        calls.append((sampled[:cut], draw(st.lists(_OBSERVATION, min_size=1, max_size=2))))
    return calls


def _prompts(calls, drift: str) -> list[tuple[tuple[int, ...], list[int]]]:
    conv: list[dict] = [{"type": "message", "role": "user", "content": "start"}]
    out = []
    for k, (sampled, observations) in enumerate(calls):
        out.append((ct.render_prompt(conv, drift=drift).token_ids, sampled))
        conv += list(ct.parse_completion(sampled, item_id=str(k)).items) + observations
    out.append((ct.render_prompt(conv, drift=drift).token_ids, []))
    return out


@given(_rollouts())
def test_each_prompt_extends_the_previous_prompt_and_sampled_ids(calls):
    prompts = _prompts(calls, "none")
    for (prev, sampled), (nxt, _) in zip(prompts, prompts[1:]):
        assert nxt[: len(prev) + len(sampled)] == prev + tuple(sampled)


@given(_actions())
def test_rerendering_parsed_output_reproduces_sampled_ids_exactly(action):
    conv = [{"role": "user", "content": "q"}]
    sampled = ct.encode_action(action)
    full = ct.render(conv + list(ct.parse_completion(sampled).items)).token_ids
    assert full == ct.render_prompt(conv).token_ids + tuple(sampled)


def _first_divergence(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    return next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)


def test_merge_drift_breaks_append_at_the_sampled_stop_token():
    conv = [{"role": "user", "content": "q"}]
    sampled = ct.encode_action(ct.AssistantAction(tool_calls=(ct.ToolCall("f", "{}"),)))
    p1 = ct.render_prompt(conv, drift="merge").token_ids
    conv2 = conv + list(ct.parse_completion(sampled).items) + [{"type": "function_call_output", "call_id": "c", "output": "o"}]
    p2 = ct.render_prompt(conv2, drift="merge").token_ids
    expected = p1 + tuple(sampled)
    i = _first_divergence(p2, expected)
    assert i == len(expected) - 1  # the stop token <|turn_end|> merged with the next <|turn_start|>
    assert (expected[i], p2[i]) == (tok.TURN_END, tok.TURN_SEP)
    assert tok.TURN_SEP in p1  # the first prompt is merged too (system/user boundaries)


def test_strip_think_drift_breaks_append_at_the_earlier_think_block():
    conv = [{"role": "user", "content": "q"}]
    sampled = ct.encode_action(ct.AssistantAction(reasoning="plan", tool_calls=(ct.ToolCall("f", "{}"),)))
    p1 = ct.render_prompt(conv, drift="strip_think").token_ids
    conv2 = conv + list(ct.parse_completion(sampled).items) + [{"type": "function_call_output", "call_id": "c", "output": "o"}]
    p2 = ct.render_prompt(conv2, drift="strip_think").token_ids
    i = _first_divergence(p2, p1 + tuple(sampled))
    assert i == len(p1)  # <think> was sampled there; the re-render starts with <|tool_call|>
    assert (p1 + tuple(sampled))[i] == tok.THINK_START and p2[i] == tok.TOOL_CALL_START


def test_strip_think_keeps_reasoning_in_the_final_assistant_turn():
    conv = [{"role": "user", "content": "q"}, {"type": "reasoning", "summary": [{"type": "summary_text", "text": "r"}]}]
    assert tok.THINK_START in ct.render(conv, drift="strip_think").token_ids
    assert tok.THINK_START not in ct.render_prompt(conv, drift="strip_think").token_ids


@given(_rollouts())
def test_strip_think_preserves_append_when_no_call_reasons(calls):
    calls = [(s, o) for s, o in calls if tok.THINK_START not in s]
    prompts = _prompts(calls, "strip_think")
    for (prev, sampled), (nxt, _) in zip(prompts, prompts[1:]):
        assert nxt[: len(prev) + len(sampled)] == prev + tuple(sampled)
