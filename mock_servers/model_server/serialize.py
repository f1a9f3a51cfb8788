"""Turn a `Generation` into vLLM chat-completion and Gym Responses JSON (dicts, stable bytes).

The dicts hold ``routed_experts`` as an `ArrayJSON` and chat ``logprobs.content`` as a
`LogprobsJSON`: fragments only this module's `dumps` encodes, byte-for-byte as the plain lists
they stand for would be, without building those lists (stdlib `json.dumps` refuses them).

Chat completion (vLLM + the extensions Gym reads)::

    {"id": "chatcmpl-<digest24>", "object": "chat.completion", "created": 0, "model": ...,
     "prompt_token_ids": [...] (when return_token_ids), "policy_version": v,
     "choices": [{"index": 0, "finish_reason": "stop"|"tool_calls"|"length", "stop_reason": null,
                  "token_ids": [...] (when return_token_ids),
                  "message": {"role": "assistant", "content": str|null, "reasoning_content": str|null,
                              "tool_calls": [{"id", "type": "function", "function": {"name", "arguments"}}],
                              "routed_experts": [[[int]]] (P+G rows, last = arange(K))},
                  "logprobs": {"content": [{"token": "token_id:<id>", "logprob", "bytes", "top_logprobs"}]} | null}],
     "usage": {"prompt_tokens", "completion_tokens", "total_tokens"}}

Responses: ``output`` is the parsed items in sampled order (reasoning, message, function_call*),
the **last** item carrying ``prompt_token_ids``, ``generation_token_ids``, ``generation_log_probs``
and ``routed_experts``; ``status`` is "incomplete" with ``incomplete_details.reason =
"max_output_tokens"`` when generation hit the token budget.
"""

from __future__ import annotations

import base64
import json
from functools import cached_property, lru_cache
from typing import Any

import numpy as np

from compactsim.harness.core import tokenizer as tok
from compactsim.mock_servers.model_server.engine import Generation


class ArrayJSON:
    """A non-negative int array standing in a body for its nested-list JSON, encoded by `dumps` without `tolist`.

    `dumps` writes exactly the bytes it would for ``array.tolist()``; no other encoder accepts it.
    """

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    @cached_property
    def fast_bytes(self) -> bytes | None:
        """The compact JSON of the array when the vectorised encoder applies, else None (kept for the ASCII retry)."""
        return _fast_int_array_json(self.array)

    def plain(self) -> list:
        return self.array.tolist()


_PAD = 0xFF  # never an ASCII byte: marks suppressed leading-zero slots
_MAX_FAST = 10**18  # values below this fit the digit arithmetic in int64


@lru_cache(maxsize=64)
def _row_template(rest: tuple[int, ...], width: int) -> tuple[np.ndarray, np.ndarray]:
    """(uint8 bytes of one row's JSON + ',', slot columns (E, width)) with every value `width` digits wide."""
    row = json.dumps(np.zeros(rest, dtype=np.int64).tolist(), separators=(",", ":")) + ","
    row = row.replace("0", "0" * width)  # the only digits in the template are the zero values
    buf = np.frombuffer(row.encode("ascii"), dtype=np.uint8).copy()
    slots = np.flatnonzero(buf == ord("0")).reshape(-1, width)
    buf.setflags(write=False)
    slots.setflags(write=False)
    return buf, slots


def _fast_int_array_json(a: Any) -> bytes | None:
    """``json.dumps(a.tolist(), separators=(",", ":")).encode()`` for a non-empty non-negative int array, else None."""
    if not isinstance(a, np.ndarray) or a.dtype.kind not in "iu" or a.ndim < 1 or a.size == 0:
        return None
    hi = int(a.max())
    if int(a.min()) < 0 or hi >= _MAX_FAST:
        return None
    width = len(str(hi))
    n = a.shape[0]
    rest = tuple(int(d) for d in a.shape[1:])
    template, slots = _row_template(rest, width)
    rowlen = template.size
    out = np.empty(n * rowlen + 1, dtype=np.uint8)
    out[0] = ord("[")
    rows = out[1:].reshape(n, rowlen)
    rows[:] = template
    v = a.reshape(n, -1)
    if width == 1:
        rows[:, slots[:, 0]] = v + ord("0")
    else:
        v = v.astype(np.int64, copy=False)
        for j in range(width):
            place = 10 ** (width - 1 - j)
            digit = ((v // place) % 10 + ord("0")).astype(np.uint8)
            if place > 1:
                digit[v < place] = _PAD  # leading zero: dropped below
            rows[:, slots[:, j]] = digit
    out[-1] = ord("]")  # replaces the last row's ','
    if width > 1:
        out = out[out != _PAD]
    return out.tobytes()


def int_array_json(a: Any) -> bytes:
    """Exactly ``json.dumps(a.tolist(), separators=(",", ":")).encode()``, vectorised for non-negative ints."""
    fast = _fast_int_array_json(a)
    if fast is not None:
        return fast
    return json.dumps(a.tolist(), separators=(",", ":")).encode("utf-8")


# Stands for the i-th fragment during encoding. A str in the body that encodes to the same token is caught by
# the uniqueness check in `_splice` (every token must occur exactly once), which then falls back to plain lists.
_SLOT = "\x00compactsim.array_json.{}\x00"


def _encode(obj: Any, ensure_ascii: bool, fragments: list[bytes] | None) -> bytes:
    def default(o: Any) -> Any:
        if isinstance(o, (ArrayJSON, LogprobsJSON)):
            fast = None if fragments is None else o.fast_bytes
            if fast is None:
                return o.plain()  # encoded by json itself, like the lists it stands for
            fragments.append(fast)
            return _SLOT.format(len(fragments) - 1)
        raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")

    text = json.dumps(obj, ensure_ascii=ensure_ascii, separators=(",", ":"), allow_nan=False, default=default)
    return text.encode("ascii" if ensure_ascii else "utf-8")


def _splice(data: bytes, fragments: list[bytes]) -> bytes | None:
    """`data` with each slot token replaced by its fragment; None when any token is not unique."""
    pieces: list[bytes] = []
    at = 0
    for i, frag in enumerate(fragments):
        token = json.dumps(_SLOT.format(i)).encode("ascii")
        pos = data.find(token)
        if pos < at or data.find(token, pos + 1) != -1:  # missing, out of order, or also inside user text
            return None
        pieces += (data[at:pos], frag)
        at = pos + len(token)
    pieces.append(data[at:])
    return b"".join(pieces)


def _dumps(obj: Any, ensure_ascii: bool) -> bytes:
    fragments: list[bytes] = []
    data = _encode(obj, ensure_ascii, fragments)
    if not fragments:
        return data
    spliced = _splice(data, fragments)
    return spliced if spliced is not None else _encode(obj, ensure_ascii, None)


def dumps(obj: Any) -> bytes:
    """Compact JSON bytes; UTF-8 kept unless text holds escaped raw bytes (lone surrogates).

    Fragments (`ArrayJSON`, `LogprobsJSON`) are written exactly as their ``plain()`` lists would be,
    without building those lists.
    """
    try:
        return _dumps(obj, ensure_ascii=False)
    except UnicodeEncodeError:
        return _dumps(obj, ensure_ascii=True)


def _token_bytes(token_id: int) -> list[int]:
    if tok.is_special(token_id):
        return list(tok.SPECIAL_TOKENS[token_id].encode("utf-8"))
    return [token_id - tok.BYTE_OFFSET]


def _token_name(token_id: int, as_ids: bool) -> str:
    return f"token_id:{token_id}" if as_ids else tok.token_repr(token_id)


def _entry(token_id: int, logprob: float, as_ids: bool) -> dict[str, Any]:
    return {"token": _token_name(token_id, as_ids), "logprob": logprob, "bytes": _token_bytes(token_id)}


@lru_cache(maxsize=4096, typed=True)  # typed: True and 1.0 are equal keys to 1, but not ints
def _entry_parts(token_id: Any, as_ids: bool) -> tuple[str, str] | None:
    """The compact JSON of one logprob entry split around its logprob: ``{"token":..,"logprob":`` and
    ``,"bytes":[..]`` (the dict left open); None when ASCII-escaped and UTF-8 output would differ."""
    if type(token_id) is not int:
        return None
    entry = _entry(token_id, 0.0, as_ids)
    ascii_, utf8 = (json.dumps(entry, ensure_ascii=a, separators=(",", ":")) for a in (True, False))
    if ascii_ != utf8:
        return None
    head, tail = ascii_[:-1].split(',"logprob":0.0', 1)
    return head + ',"logprob":', tail


def _float_texts(values: Any) -> list[str] | None:
    """json's text of each value (``float.__repr__``), written by json's C encoder in one call; None
    unless every value is a finite float."""
    if not values:
        return []
    if set(map(type, values)) != {float}:
        return None
    try:
        return json.dumps(values, separators=(",", ":"), allow_nan=False)[1:-1].split(",")
    except ValueError:  # NaN or infinity: the general encoder raises json's own error
        return None


class LogprobsJSON:
    """A chat ``logprobs.content`` list standing in a body, encoded by `dumps` without building its dicts.

    Each entry is ``{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}``;
    `plain` builds the lists themselves, which the fallback encodes and the tests compare against.
    """

    def __init__(self, ids: tuple[int, ...], logprobs: tuple[float, ...], top: tuple, as_ids: bool) -> None:
        self.ids, self.logprobs, self.top, self.as_ids = ids, logprobs, top, as_ids

    def plain(self) -> list[dict[str, Any]]:
        out = []
        for i, lp in enumerate(self.logprobs):
            top = self.top[i] if i < len(self.top) else ()
            out.append({**_entry(self.ids[i], lp, self.as_ids),
                        "top_logprobs": [_entry(j, v, self.as_ids) for j, v in top]})
        return out

    @cached_property
    def fast_bytes(self) -> bytes | None:
        """The compact JSON of `plain`, or None when any value needs the general encoder (a logprob that
        is not a finite float, which includes the NaN `dumps` refuses; an id that is not an int)."""
        n = len(self.logprobs)
        entries = self._entry_texts(self.ids[:n], self.logprobs) if len(self.ids) >= n else None
        if entries is None:
            return None
        tops = [""] * n
        for i, top in enumerate(self.top[:n]):
            pairs = list(top)
            alts = self._entry_texts([j for j, _ in pairs], [v for _, v in pairs])
            if alts is None:
                return None
            tops[i] = ",".join([alt + "}" for alt in alts])
        return ("[" + ",".join([e + ',"top_logprobs":[' + t + "]}" for e, t in zip(entries, tops)]) + "]").encode("ascii")

    def _entry_texts(self, ids: Any, logprobs: Any) -> list[str] | None:
        """Each entry's JSON without its closing brace, or None when the general encoder must write them."""
        texts = _float_texts(logprobs)
        parts = [_entry_parts(t, self.as_ids) for t in ids]
        if texts is None or None in parts:
            return None
        return [head + text + tail for (head, tail), text in zip(parts, texts)]  # type: ignore[misc]


#: NeMo-RL's routed-experts wire envelope (nemo-rl-semantics §1.6): its magic, and the dtype the mock writes
ROUTES_ENVELOPE = "nrlre1"


def routes_envelope(routes: np.ndarray) -> str:
    """``nrlre1:int16:SxLxK:<base64 of the little-endian int16 bytes, row-major>`` for a [tokens, layers, top_k] array."""
    s, layers, k = (int(d) for d in routes.shape)
    data = np.ascontiguousarray(routes, dtype="<i2").tobytes()
    return f"{ROUTES_ENVELOPE}:int16:{s}x{layers}x{k}:" + base64.b64encode(data).decode("ascii")


def _routes(gen: Generation, routes_format: str = "lists") -> ArrayJSON | str | None:
    if gen.routes is None:
        return None
    return routes_envelope(gen.routes) if routes_format == ROUTES_ENVELOPE else ArrayJSON(gen.routes)


def chat_completion(gen: Generation, *, model: str, request_digest: str, want_logprobs: bool, as_ids: bool,
                    return_token_ids: bool, routes_format: str = "lists") -> dict[str, Any]:
    """The vLLM chat-completion body for `gen`; `routes_format` as `ServerSettings.routed_experts_format`."""
    parsed = gen.parsed
    finish = gen.finish_reason
    if finish == "stop" and parsed.tool_calls:
        finish = "tool_calls"
    message: dict[str, Any] = {
        "role": "assistant",
        "content": parsed.content,
        "reasoning_content": parsed.reasoning,
        "tool_calls": [
            {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in parsed.tool_calls
        ],
    }
    if gen.routes is not None:
        message["routed_experts"] = _routes(gen, routes_format)
    logprobs = None
    if want_logprobs and gen.logprobs is not None:
        logprobs = {"content": LogprobsJSON(gen.sampled_ids, gen.logprobs, gen.top_logprobs, as_ids)}
    choice: dict[str, Any] = {"index": 0, "message": message, "logprobs": logprobs, "finish_reason": finish, "stop_reason": None}
    body: dict[str, Any] = {
        "id": f"chatcmpl-{request_digest[:24]}",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [choice],
        "usage": {"prompt_tokens": len(gen.prompt_ids), "completion_tokens": len(gen.sampled_ids),
                  "total_tokens": len(gen.prompt_ids) + len(gen.sampled_ids)},
        "policy_version": gen.policy_version,
    }
    if return_token_ids:
        choice["token_ids"] = list(gen.sampled_ids)
        body["prompt_token_ids"] = list(gen.prompt_ids)
    return body


def responses_body(gen: Generation, *, model: str, request_digest: str, tools: list | None,
                   routes_format: str = "lists") -> dict[str, Any]:
    """The Gym Responses body for `gen`: token fields on the last output item."""
    output = [dict(item) for item in gen.parsed.items]
    if not output:  # cannot happen for a valid step; keep the evidence somewhere visible
        output = [{"type": "message", "id": f"msg_{request_digest[:12]}_0", "role": "assistant", "status": "completed",
                   "content": [{"type": "output_text", "text": "", "annotations": []}]}]
    last = output[-1]
    last["prompt_token_ids"] = list(gen.prompt_ids)
    last["generation_token_ids"] = list(gen.sampled_ids)
    if gen.logprobs is not None:
        last["generation_log_probs"] = list(gen.logprobs)
    last["routed_experts"] = _routes(gen, routes_format)
    incomplete = gen.finish_reason == "length"
    return {
        "id": f"resp_{request_digest[:24]}",
        "object": "response",
        "created_at": 0,
        "model": model,
        "status": "incomplete" if incomplete else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": tools or [],
        "usage": {"input_tokens": len(gen.prompt_ids), "output_tokens": len(gen.sampled_ids),
                  "total_tokens": len(gen.prompt_ids) + len(gen.sampled_ids)},
        "policy_version": gen.policy_version,
    }


__all__ = ["ROUTES_ENVELOPE", "ArrayJSON", "LogprobsJSON", "chat_completion", "dumps", "int_array_json", "responses_body",
           "routes_envelope"]
