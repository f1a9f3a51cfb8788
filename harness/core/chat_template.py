"""Render Responses-API items (or chat messages) to token ids, and parse sampled ids back to items.

Rendering grammar (ids from `compactsim.harness.core.tokenizer`; ``text`` = UTF-8 byte tokens)::

    conversation   := <|bos|> turn*  [<|turn_start|> <|assistant|>]      # generation prompt
    system/user    := <|turn_start|> (<|system|>|<|user|>) content <|turn_end|>
    assistant turn := <|turn_start|> <|assistant|> action* <|turn_end|>
    action         := <think> text </think>                              # reasoning item
                    | text                                               # assistant message
                    | <|tool_call|> name <|tool_args|> arguments <|/tool_call|>   # function_call
    tool turn      := <|turn_start|> <|tool|> <|tool_response|> content <|/tool_response|> <|turn_end|>
    content        := (text | <|image|> x IMAGE_PATCH_TOKENS)*           # parts in order, no separators

A maximal run of consecutive assistant-side items (reasoning, assistant message, function_call)
is one assistant turn. The model's sampled ids for one call are exactly ``action* <|turn_end|>``
(`<|turn_end|>` is the stop token), so **append property**: rendering a conversation followed by
the items `parse_completion` made from a call's sampled ids gives back exactly
``prompt_ids + sampled_ids`` followed by whatever comes next. Rendering is a concatenation of
per-turn pieces and the tokenizer has no merges, so nothing earlier ever changes.

Drift modes (opt-in, to reproduce legacy-path failures on purpose):

- ``"merge"``: after rendering, every ``<|turn_end|><|turn_start|>`` pair becomes one
  ``<|turn_sep|>`` token (a merge across a message boundary). The sampled stop token then merges
  with the next turn's opener, so call *i+1*'s prompt no longer starts with call *i*'s
  prompt + sampled ids.
- ``"strip_think"``: reasoning is dropped from every assistant turn that is not the last turn of
  the render (as many chat templates do), so an earlier call's ``<think>`` block vanishes on
  re-render.

Not rendered (by design): ``tools`` definitions, ``call_id`` values, item ids and statuses. Image
parts are never fetched here: `Rendered.images` lists them in prompt order for the caller to
decode (`compactsim.harness.core.images`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from compactsim.harness.core import tokenizer as tok
from compactsim.harness.core.digests import canonical_digest
from compactsim.harness.core.errors import ConfigError

DriftMode = Literal["none", "merge", "strip_think"]
DRIFT_MODES: tuple[str, ...] = ("none", "merge", "strip_think")

GENERATION_PROMPT: tuple[int, ...] = (tok.TURN_START, tok.ROLE_ASSISTANT)

_ROLE_TOKEN = {"system": tok.ROLE_SYSTEM, "developer": tok.ROLE_SYSTEM, "user": tok.ROLE_USER}
_TEXT_PART_TYPES = ("input_text", "output_text", "text", "summary_text", "reasoning_text")
_IMAGE_PART_TYPES = ("input_image", "image_url", "image")


@dataclass(frozen=True, slots=True)
class ImageRef:
    """One image in a rendered prompt, in order: the part as given and its Gym-style media id."""

    image_url: str
    detail: str | None
    media_id: str  # "media-" + canonical_digest(part)[:24], part = {"type","image_url"[,"detail"]}


@dataclass(frozen=True, slots=True)
class Rendered:
    """Token ids of a rendered conversation and the images whose placeholders it contains."""

    token_ids: tuple[int, ...]
    images: tuple[ImageRef, ...]

    @property
    def media_ids(self) -> tuple[str, ...]:
        return tuple(im.media_id for im in self.images)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A function call: name and raw JSON argument text (rendered verbatim)."""

    name: str
    arguments: str
    call_id: str | None = None


@dataclass(frozen=True, slots=True)
class AssistantAction:
    """What one model call produced, in render order: reasoning, then text, then tool calls."""

    reasoning: str | None = None
    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True, slots=True)
class ParsedCompletion:
    """Sampled ids read back as Responses output items (in sampled order) plus chat-style views."""

    items: tuple[dict[str, Any], ...]
    reasoning: str | None  # all reasoning blocks joined (chat `reasoning_content`)
    content: str | None  # all message text joined (chat `content`)
    tool_calls: tuple[ToolCall, ...]
    stopped: bool  # True when the ids ended with the stop token <|turn_end|>


# --------------------------------------------------------------------------- internal model


@dataclass(frozen=True, slots=True)
class _Seg:
    """One rendered unit: kind in {"system","user","tool","reasoning","text","call"}."""

    kind: str
    ids: tuple[int, ...]
    images: tuple[ImageRef, ...] = ()


def _bad(path: str, why: str) -> ConfigError:
    return ConfigError("invalid_argument", f"{path}: {why}")


def _media_ref(url: Any, detail: Any, path: str) -> ImageRef:
    if not isinstance(url, str) or not url:
        raise _bad(f"{path}.image_url", f"expected a non-empty data URL string, found {type(url).__name__}")
    if detail is not None and not isinstance(detail, str):
        raise _bad(f"{path}.detail", f"expected a string, found {type(detail).__name__}")
    part: dict[str, Any] = {"type": "input_image", "image_url": url}
    if detail is not None:
        part["detail"] = detail
    return ImageRef(image_url=url, detail=detail, media_id="media-" + canonical_digest(part)[:24])


def _content(content: Any, path: str) -> tuple[list[int], list[ImageRef]]:
    """Render message/tool content: a string, or a list of text and image parts."""
    if content is None:
        return [], []
    if isinstance(content, str):
        return tok.encode_text(content), []
    if not isinstance(content, list):
        raise _bad(path, f"expected a string or a list of parts, found {type(content).__name__}")
    ids: list[int] = []
    images: list[ImageRef] = []
    for j, part in enumerate(content):
        p = f"{path}[{j}]"
        if isinstance(part, str):
            ids.extend(tok.encode_text(part))
            continue
        if not isinstance(part, Mapping):
            raise _bad(p, f"expected an object, found {type(part).__name__}")
        ptype = part.get("type")
        if ptype in _TEXT_PART_TYPES:
            text = part.get("text")
            if not isinstance(text, str):
                raise _bad(f"{p}.text", f"expected a string, found {type(text).__name__}")
            ids.extend(tok.encode_text(text))
        elif ptype in _IMAGE_PART_TYPES:
            url = part.get("image_url")
            detail = part.get("detail")
            if isinstance(url, Mapping):  # chat-completions shape {"url": ..., "detail": ...}
                detail = url.get("detail", detail)
                url = url.get("url")
            images.append(_media_ref(url, detail, p))
            ids.extend([tok.IMAGE] * tok.IMAGE_PATCH_TOKENS)
        else:
            raise _bad(f"{p}.type", f"unsupported content part type {ptype!r}; expected one of "
                       f"{list(_TEXT_PART_TYPES + _IMAGE_PART_TYPES)}")
    return ids, images


def _reasoning_text(item: Mapping[str, Any], path: str) -> str:
    """Reasoning item text: its summary texts joined, else its content texts joined."""
    for key in ("summary", "content"):
        parts = item.get(key)
        if parts:
            if not isinstance(parts, list):
                raise _bad(f"{path}.{key}", f"expected a list, found {type(parts).__name__}")
            texts = []
            for j, part in enumerate(parts):
                text = part.get("text") if isinstance(part, Mapping) else None
                if not isinstance(text, str):
                    raise _bad(f"{path}.{key}[{j}].text", "expected a string")
                texts.append(text)
            return "".join(texts)
    return ""


def _reasoning_seg(text: str) -> _Seg:
    return _Seg("reasoning", (tok.THINK_START, *tok.encode_text(text), tok.THINK_END))


def _call_seg(name: Any, arguments: Any, path: str) -> _Seg:
    if not isinstance(name, str):
        raise _bad(f"{path}.name", f"expected a string, found {type(name).__name__}")
    if not isinstance(arguments, str):
        raise _bad(f"{path}.arguments", f"expected a JSON string, found {type(arguments).__name__}")
    return _Seg("call", (tok.TOOL_CALL_START, *tok.encode_text(name), tok.TOOL_ARGS, *tok.encode_text(arguments), tok.TOOL_CALL_END))


def _tool_seg(output: Any, path: str) -> _Seg:
    ids, images = _content(output, path)
    return _Seg("tool", (tok.TURN_START, tok.ROLE_TOOL, tok.TOOL_RESPONSE_START, *ids, tok.TOOL_RESPONSE_END, tok.TURN_END), tuple(images))


def _item_segs(item: Any, path: str) -> list[_Seg]:
    """One Responses input item -> segments."""
    if not isinstance(item, Mapping):
        raise _bad(path, f"expected an object, found {type(item).__name__}")
    itype = item.get("type", "message" if "role" in item else None)
    if itype == "message":
        role = item.get("role")
        if role == "assistant":
            ids, images = _content(item.get("content"), f"{path}.content")
            if images:
                raise _bad(f"{path}.content", "assistant messages cannot carry images")
            return [_Seg("text", tuple(ids))]
        if role not in _ROLE_TOKEN:
            raise _bad(f"{path}.role", f"expected one of system/developer/user/assistant, found {role!r}")
        ids, images = _content(item.get("content"), f"{path}.content")
        kind = "system" if _ROLE_TOKEN[role] == tok.ROLE_SYSTEM else "user"
        return [_Seg(kind, (tok.TURN_START, _ROLE_TOKEN[role], *ids, tok.TURN_END), tuple(images))]
    if itype == "reasoning":
        return [_reasoning_seg(_reasoning_text(item, path))]
    if itype == "function_call":
        return [_call_seg(item.get("name"), item.get("arguments"), path)]
    if itype == "function_call_output":
        return [_tool_seg(item.get("output"), f"{path}.output")]
    raise _bad(f"{path}.type", f"unsupported item type {itype!r}; expected message, reasoning, function_call "
               "or function_call_output")


_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"


def _chat_segs(msg: Any, path: str) -> list[_Seg]:
    """One chat-completions message -> segments (same ids as the equivalent Responses items)."""
    if not isinstance(msg, Mapping):
        raise _bad(path, f"expected an object, found {type(msg).__name__}")
    role = msg.get("role")
    if role in _ROLE_TOKEN:
        ids, images = _content(msg.get("content"), f"{path}.content")
        kind = "system" if _ROLE_TOKEN[role] == tok.ROLE_SYSTEM else "user"
        return [_Seg(kind, (tok.TURN_START, _ROLE_TOKEN[role], *ids, tok.TURN_END), tuple(images))]
    if role == "tool":
        return [_tool_seg(msg.get("content"), f"{path}.content")]
    if role == "assistant":
        segs: list[_Seg] = []
        reasoning = msg.get("reasoning_content", msg.get("reasoning"))
        content = msg.get("content")
        if isinstance(content, list):  # join text parts; assistant content has no images
            ids, images = _content(content, f"{path}.content")
            if images:
                raise _bad(f"{path}.content", "assistant messages cannot carry images")
            content = tok.decode_text(ids)
        if content is not None and not isinstance(content, str):
            raise _bad(f"{path}.content", f"expected a string, found {type(content).__name__}")
        if reasoning is None and content and content.startswith(_THINK_OPEN) and _THINK_CLOSE in content:
            end = content.index(_THINK_CLOSE)
            reasoning, content = content[len(_THINK_OPEN):end], content[end + len(_THINK_CLOSE):]
        if reasoning is not None:
            if not isinstance(reasoning, str):
                raise _bad(f"{path}.reasoning_content", "expected a string")
            segs.append(_reasoning_seg(reasoning))
        if content:
            segs.append(_Seg("text", tuple(tok.encode_text(content))))
        calls = msg.get("tool_calls")
        if calls is not None and not isinstance(calls, list | tuple):
            raise _bad(f"{path}.tool_calls", f"expected a list of tool calls, found {type(calls).__name__}")
        for j, call in enumerate(calls or []):
            p = f"{path}.tool_calls[{j}]"
            fn = call.get("function") if isinstance(call, Mapping) else None
            if not isinstance(fn, Mapping):
                raise _bad(f"{p}.function", "expected an object with name and arguments")
            segs.append(_call_seg(fn.get("name"), fn.get("arguments"), f"{p}.function"))
        return segs
    raise _bad(f"{path}.role", f"expected one of system/developer/user/assistant/tool, found {role!r}")


def _assemble(segs: Sequence[_Seg], *, drift: str, add_generation_prompt: bool) -> Rendered:
    if drift not in DRIFT_MODES:
        raise ConfigError("invalid_argument", f"drift={drift!r}: expected one of {list(DRIFT_MODES)}")
    # group consecutive assistant-side segments into turns
    turns: list[tuple[bool, list[_Seg]]] = []
    for s in segs:
        assistant_side = s.kind in ("reasoning", "text", "call")
        if assistant_side and turns and turns[-1][0]:
            turns[-1][1].append(s)
        else:
            turns.append((assistant_side, [s]))
    ids: list[int] = [tok.BOS]
    images: list[ImageRef] = []
    for k, (assistant_side, group) in enumerate(turns):
        if not assistant_side:
            ids.extend(group[0].ids)
            images.extend(group[0].images)
            continue
        is_last_turn = k == len(turns) - 1 and not add_generation_prompt
        ids.extend((tok.TURN_START, tok.ROLE_ASSISTANT))
        for s in group:
            if drift == "strip_think" and s.kind == "reasoning" and not is_last_turn:
                continue
            ids.extend(s.ids)
        ids.append(tok.TURN_END)
    if add_generation_prompt:
        ids.extend(GENERATION_PROMPT)
    if drift == "merge":
        ids = _merge_turn_boundaries(ids)
    return Rendered(token_ids=tuple(ids), images=tuple(images))


def _merge_turn_boundaries(ids: list[int]) -> list[int]:
    out: list[int] = []
    for t in ids:
        if t == tok.TURN_START and out and out[-1] == tok.TURN_END:
            out[-1] = tok.TURN_SEP
        else:
            out.append(t)
    return out


# --------------------------------------------------------------------------- public API


def render(
    items: Sequence[Any],
    *,
    drift: DriftMode = "none",
    add_generation_prompt: bool = False,
    instructions: str | None = None,
) -> Rendered:
    """Render Responses-API input items (a string counts as one user message) to ids and images.

    `instructions` (the Responses parameter) renders as a system message before the items.
    Raises `ConfigError("invalid_argument")` naming the offending path (e.g. ``input[2].content[0].type``).
    """
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    if not isinstance(items, (list, tuple)):
        raise _bad("input", f"expected a string or a list of items, found {type(items).__name__}")
    segs: list[_Seg] = []
    if instructions is not None:
        if not isinstance(instructions, str):
            raise _bad("instructions", f"expected a string, found {type(instructions).__name__}")
        segs.append(_Seg("system", (tok.TURN_START, tok.ROLE_SYSTEM, *tok.encode_text(instructions), tok.TURN_END)))
    for i, item in enumerate(items):
        segs.extend(_item_segs(item, f"input[{i}]"))
    return _assemble(segs, drift=drift, add_generation_prompt=add_generation_prompt)


def render_prompt(items: Sequence[Any], *, drift: DriftMode = "none", instructions: str | None = None) -> Rendered:
    """`render` plus the generation prompt ``<|turn_start|><|assistant|>``: what a model call sees."""
    return render(items, drift=drift, add_generation_prompt=True, instructions=instructions)


def render_chat(messages: Sequence[Any], *, drift: DriftMode = "none", add_generation_prompt: bool = True) -> Rendered:
    """Render chat-completions messages; equal ids to the equivalent Responses items.

    Assistant messages render reasoning (``reasoning_content``/``reasoning``, or a leading
    literal ``<think>…</think>`` in ``content``), then ``content``, then ``tool_calls``.
    """
    if not isinstance(messages, (list, tuple)):
        raise _bad("messages", f"expected a list, found {type(messages).__name__}")
    segs: list[_Seg] = []
    for i, msg in enumerate(messages):
        segs.extend(_chat_segs(msg, f"messages[{i}]"))
    return _assemble(segs, drift=drift, add_generation_prompt=add_generation_prompt)


def encode_action(action: AssistantAction, *, stop: bool = True) -> list[int]:
    """The sampled ids a model emits for `action` (ends with ``<|turn_end|>`` when `stop`)."""
    ids: list[int] = []
    if action.reasoning is not None:
        ids.extend(_reasoning_seg(action.reasoning).ids)
    if action.text:
        ids.extend(tok.encode_text(action.text))
    for j, call in enumerate(action.tool_calls):
        ids.extend(_call_seg(call.name, call.arguments, f"action.tool_calls[{j}]").ids)
    if stop:
        ids.append(tok.TURN_END)
    return ids


def parse_completion(ids: Sequence[int], *, item_id: str = "0") -> ParsedCompletion:
    """Read sampled ids (``action* [<|turn_end|>]``) back into Responses output items.

    Items get ids ``rs_<item_id>_<k>``, ``msg_<item_id>_<k>``, ``fc_<item_id>_<k>`` and call ids
    ``call_<item_id>_<k>``. A block cut off by the end of `ids` (finish_reason "length") is
    closed implicitly. Raises `ConfigError("invalid_argument")` on ids that fit no action
    (e.g. a turn opener, an image token, or anything after the stop token).
    """
    items: list[dict[str, Any]] = []
    calls: list[ToolCall] = []
    reasoning_parts: list[str] = []
    text_parts: list[str] = []
    stopped = False
    i, n = 0, len(ids)

    def read_text(start: int, terminators: tuple[int, ...]) -> tuple[str, int]:
        j = start
        while j < n and not tok.is_special(ids[j]):
            j += 1
        if j < n and ids[j] not in terminators:
            raise _bad(f"ids[{j}]", f"unexpected {tok.token_repr(ids[j])}; expected text or "
                       f"{[tok.token_repr(t) for t in terminators]}")
        return tok.decode_text(ids[start:j]), j

    while i < n:
        t = tok.check_token_id(ids[i], where=f"ids[{i}]")
        k = len(items)
        if t == tok.TURN_END:
            if i != n - 1:
                raise _bad(f"ids[{i + 1}]", f"{n - i - 1} id(s) after the stop token <|turn_end|>")
            stopped = True
            i += 1
        elif t == tok.THINK_START:
            text, i = read_text(i + 1, (tok.THINK_END,))
            i += 1  # past </think> (or past the end when truncated)
            reasoning_parts.append(text)
            items.append({"type": "reasoning", "id": f"rs_{item_id}_{k}",
                          "summary": [{"type": "summary_text", "text": text}]})
        elif t == tok.TOOL_CALL_START:
            name, i = read_text(i + 1, (tok.TOOL_ARGS,))
            args = ""
            if i < n:  # at <|tool_args|>; a name cut off by the end of ids has no arguments
                args, i = read_text(i + 1, (tok.TOOL_CALL_END,))
            i += 1
            call = ToolCall(name=name, arguments=args, call_id=f"call_{item_id}_{k}")
            calls.append(call)
            items.append({"type": "function_call", "id": f"fc_{item_id}_{k}", "call_id": call.call_id,
                          "name": name, "arguments": args, "status": "completed"})
        elif not tok.is_special(t):
            text, i = read_text(i, (tok.TURN_END, tok.THINK_START, tok.TOOL_CALL_START))
            text_parts.append(text)
            items.append({"type": "message", "id": f"msg_{item_id}_{k}", "role": "assistant", "status": "completed",
                          "content": [{"type": "output_text", "text": text, "annotations": []}]})
        else:
            raise _bad(f"ids[{i}]", f"unexpected {tok.token_repr(t)} in sampled ids; expected <think>, "
                       "<|tool_call|>, text or <|turn_end|>")
    return ParsedCompletion(
        items=tuple(items),
        reasoning="".join(reasoning_parts) if reasoning_parts else None,
        content="".join(text_parts) if text_parts else None,
        tool_calls=tuple(calls),
        stopped=stopped,
    )


__all__ = [
    "DRIFT_MODES",
    "GENERATION_PROMPT",
    "AssistantAction",
    "DriftMode",
    "ImageRef",
    "ParsedCompletion",
    "Rendered",
    "ToolCall",
    "encode_action",
    "parse_completion",
    "render",
    "render_chat",
    "render_prompt",
]
