"""Request-level limits shared by the mock servers, and the ASGI plumbing that keeps them honest.

A client's bad input must get a typed 4xx JSON answer that names the limit and the field, never
a 500, and never a dropped keep-alive connection:

- `load_json` decodes a body under caps on nesting depth and integer size and refuses
  non-finite numbers (``NaN``, ``Infinity``, ``1e999``) *before* any of it reaches pydantic,
  the chat template or a digest (5,000-digit integers and 100k nested brackets used to crash
  those with `ValueError` / `RecursionError`).
- `BodyLimitMiddleware` answers 413 for a body over its cap after draining what the client
  sends (bounded), so the client reads the answer instead of a reset and the connection stays
  usable; and 408 (closing the connection) for a body that does not complete within its
  deadline, so a client that declares more bytes than it sends, or stops mid-body, cannot hold
  a connection and a handler forever. `ErrorGuardMiddleware` turns a server bug into a JSON 500
  without closing the connection.
- `run_off_loop` runs a handler coroutine (parsing, rendering, generation, serialisation) on a
  shared worker thread with its own event loop, so `/health` and other requests stay responsive while
  a large request is being worked on; cancelling the caller cancels the coroutine.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import json
import logging
import math
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from compactsim.mock_servers.loop_thread import LoopThread

T = TypeVar("T")
_log = logging.getLogger("compactsim.mock_servers")


class LimitExceeded(Exception):
    """A request over a declared limit (or not representable): answered ``status`` with its JSON body.

    `limit` is the settings name of the cap (``max_int_digits``, ...) or a fixed rule
    (``finite_numbers``, ``json_syntax``); `field` is the dotted path of the offending value
    (``metadata.compactsim_turn``, ``messages[0].content``) or ``body``.
    """

    def __init__(self, status: int, limit: str, field: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.limit = limit
        self.field = field
        self.detail = detail

    def body(self) -> dict[str, Any]:
        return {"detail": f"{self.field}: {self.detail}", "limit": self.limit, "field": self.field}


@dataclass(frozen=True, slots=True)
class JsonLimits:
    """Caps applied while decoding a JSON body (defaults fit every vLLM / Gym body by a wide margin)."""

    max_depth: int = 64
    max_int_digits: int = 20


class _BigInt:
    """An integer literal with too many digits (kept as text: converting it is the expensive, crashing part)."""

    __slots__ = ("digits",)

    def __init__(self, text: str) -> None:
        self.digits = len(text.lstrip("-"))


class _NonFinite:
    """A number that is not a finite float (``NaN``, ``Infinity``, or a literal that overflows)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def field_path(path: tuple[str | int, ...]) -> str:
    """``("messages", 0, "content")`` -> ``messages[0].content`` (``body`` for the root)."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


# a JSON string literal; on a valid body, blanking these leaves exactly its structure and numbers.
# An unclosed one (even one ending in a lone backslash) runs to the end: no attempt can fail after
# a long scan, which would make `sub` quadratic in the body size.
_STRING_LITERAL = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.DOTALL)
# escapes and UTF-8 bytes that decode to a surrogate (`json.loads` of bytes uses "surrogatepass")
_SURROGATE_SOURCE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789E", b"000000000e")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_BRACKET_STEP = np.zeros(256, dtype=np.int32)
_BRACKET_STEP[list(b"[{")] = 1
_BRACKET_STEP[list(b"]}")] = -1


def _structure(raw: bytes) -> bytes | None:
    """`raw` with its string literals removed, or None when it is not UTF-8 (UTF-16/32 put a NUL
    after every digit, so no byte pattern can see their numbers: they always take the hooks)."""
    if json.detect_encoding(raw) not in ("utf-8", "utf-8-sig"):
        return None
    return _STRING_LITERAL.sub(b"", raw)


def _may_hold_unsafe_numbers(structure: bytes, int_digits: int) -> bool:
    """Whether a body could hold an integer longer than `int_digits` or a float that overflows.

    Both need a run of more than `int_digits` digits (or of more than 200, where a float could
    overflow with a two-digit exponent) or an exponent of three digits or more (``1e999``). With
    strings blanked out (`_structure`), every digit left belongs to a number, so two substring
    searches decide it; a body without either (almost every body: token arrays are short
    numbers) is decoded without the per-number Python hooks.
    """
    digits = structure.translate(_DIGITS_AS_ZERO)
    run = b"0" * (min(int_digits, 200) + 1)
    return run in digits or b"e000" in digits or b"e+000" in digits or b"e-000" in digits


def _structure_proves_clean(raw: bytes, structure: bytes, max_depth: int) -> bool:
    """Whether `check_tree` must pass on a body decoded without hooks.

    `check_tree` then fails only on a constant (``NaN``, ``Infinity``), on a string holding a
    lone surrogate, or on nesting deeper than `max_depth`. The structure shows constants and
    depth exactly (a constant is a bare word; the depth is the running bracket count, brackets
    inside strings excluded). Surrogates can only come from a ``\\uD8..``-``\\uDF..`` escape or
    UTF-8 ``ED A0..BF`` bytes, looked for anywhere (a match in a paired escape only costs the
    walk). The walk costs a Python step per token id; this is a few C passes over the bytes.
    """
    if b"NaN" in structure or b"Infinity" in structure or _SURROGATE_SOURCE.search(raw) is not None:
        return False
    brackets = structure.translate(None, _NOT_BRACKETS)
    if not brackets or len(brackets) <= max_depth:
        return True
    return int(np.cumsum(_BRACKET_STEP[np.frombuffer(brackets, dtype=np.uint8)]).max()) <= max_depth


def load_json(raw: bytes, limits: JsonLimits) -> Any:
    """Decode `raw` under `limits`; `LimitExceeded` (422) on any problem, ``limit="json_syntax"`` for bad JSON."""
    cap = limits.max_int_digits

    def parse_int(text: str) -> int | _BigInt:
        return _BigInt(text) if len(text) - text.startswith("-") > cap else int(text)

    def parse_float(text: str) -> float | _NonFinite:
        value = float(text)
        return value if math.isfinite(value) else _NonFinite(text)

    structure = _structure(raw)
    hooked = structure is None or _may_hold_unsafe_numbers(structure, cap)
    try:
        if hooked:
            obj = json.loads(raw, parse_int=parse_int, parse_float=parse_float, parse_constant=_NonFinite)
        else:  # the C decoder alone: no long integer, no constant, no exponent that could overflow
            obj = json.loads(raw, parse_constant=_NonFinite)
    except RecursionError:
        raise LimitExceeded(422, "max_json_depth", "body",
                            f"JSON nesting is deeper than the limit of {limits.max_depth} levels") from None
    except UnicodeDecodeError as exc:
        raise LimitExceeded(422, "json_syntax", "body", f"body is not UTF-8 JSON: {exc.reason} at byte {exc.start}") from None
    except json.JSONDecodeError as exc:
        raise LimitExceeded(422, "json_syntax", "body", f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except ValueError as exc:  # a backstop: Python's own integer-size guard, should a number reach it
        raise LimitExceeded(422, "max_int_digits", "body", f"a number in the body cannot be read: {exc}") from None
    if structure is None or hooked or not _structure_proves_clean(raw, structure, limits.max_depth):
        check_tree(obj, limits)  # finds the problem and names its field
    return obj


_PLAIN = frozenset({int, float, bool, type(None)})


def check_tree(obj: Any, limits: JsonLimits) -> None:
    """Walk a decoded body (iteratively: the walk itself must not recurse) and report the first problem."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(obj, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, dict):
            for key in node:
                _check_text(key, path)
            children: Any = node.items()
        elif isinstance(node, list):
            children = enumerate(node)
        else:
            if isinstance(node, str):
                _check_text(node, path)
                continue
            if isinstance(node, _BigInt):
                raise LimitExceeded(422, "max_int_digits", field_path(path),
                                    f"integer has {node.digits} digits; the limit is {limits.max_int_digits}")
            if isinstance(node, _NonFinite):
                raise LimitExceeded(422, "finite_numbers", field_path(path), f"{node.text} is not a finite number")
            continue
        if len(path) >= limits.max_depth:
            raise LimitExceeded(422, "max_json_depth", field_path(path),
                                f"JSON nesting is deeper than the limit of {limits.max_depth} levels")
        # plain numbers, booleans, nulls and ASCII text cannot fail a check: skipped without building
        # their paths (token arrays are most of a body); reversed, so the first problem in document
        # order is the one reported
        pending = [(child, (*path, key)) for key, child in children
                   if type(child) not in _PLAIN and not (type(child) is str and child.isascii())]
        stack.extend(reversed(pending))


def _check_text(text: str, path: tuple[str | int, ...]) -> None:
    """JSON may spell a lone surrogate (``"\\ud800"``); it is not Unicode text and cannot be UTF-8 encoded
    (digests, the tokenizer and the log all do), so it is refused here."""
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise LimitExceeded(422, "unicode_text", field_path(path),
                            f"string holds an unpaired surrogate U+{ord(text[exc.start]):04X} at index {exc.start}; "
                            "JSON strings must be valid Unicode") from None


# ---------------------------------------------------------------------------------------------- ASGI


def _json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


async def send_json(send: Send, status: int, obj: Any, *, close: bool = False) -> None:
    """A complete JSON answer sent straight over ASGI (`close`: ask the client not to reuse the connection)."""
    await _send_body(send, status, _json_bytes(obj), close=close)


async def _send_body(send: Send, status: int, body: bytes, *, close: bool) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    def __init__(self, seen: int) -> None:
        super().__init__(seen)
        self.seen = seen


class _BodyTimedOut(Exception):
    def __init__(self, seen: int) -> None:
        super().__init__(seen)
        self.seen = seen


#: False unless an in-process transport serves the request: its body is complete in memory before
#: the app runs, so no client can stall it and `BodyLimitMiddleware` sets no body deadline at all.
BODY_IN_MEMORY: contextvars.ContextVar[bool] = contextvars.ContextVar("compactsim_body_in_memory", default=False)

#: Told of each refusal the middleware answers itself (413, 408) before it is sent: (request path,
#: status, sha256 hex of the body bytes read before answering, the answer's JSON object, the answer's
#: bytes as sent), so a server can log the refusal like its others.
BodyRefusalHook = Callable[[str, int, str, dict[str, Any], bytes], None]


async def _receive_by(receive: Receive, deadline: float | None) -> Message | None:
    """The next ASGI message, or None when `deadline` (event-loop time, monotonic) passes first."""
    if deadline is None:
        return await receive()
    try:
        async with asyncio.timeout_at(deadline):
            return await receive()
    except TimeoutError:
        return None


class BodyLimitMiddleware:
    """413 for a body over its cap (declared or streamed), naming the limit; per-path caps override;
    408 for a body that is not complete `body_timeout_s` after the request's headers arrived.

    The rest of an oversized body is read and discarded (up to `drain_factor` × the cap) before
    answering, so the client gets the 413 rather than a reset while it is still writing, and the
    keep-alive connection stays usable; past that bound the answer asks the client to close.

    The body deadline exists because the ASGI server waits for a declared body without limit: a
    client that sends fewer bytes than its ``Content-Length`` (or stops mid-body) would hold the
    connection and the handler forever. Past the deadline the answer is 408
    ``{"detail", "limit": "body_timeout_s", "field": "body"}`` with ``connection: close`` (the
    rest of the body may still be on its way, so the connection cannot be reused); `on_refusal`
    hears of it first. It also bounds the drain before a 413, which `on_refusal` hears of too. The deadline is the only
    clock-dependent decision: every answer sent before it is unchanged, and a transport that
    holds the whole body in memory (`BODY_IN_MEMORY`) gets no timer at all.
    """

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, path_caps: dict[str, tuple[str, int]] | None = None,
                 limit_name: str = "max_body_bytes", drain_factor: int = 4, body_timeout_s: float | None = None,
                 timeout_name: str = "body_timeout_s", on_refusal: BodyRefusalHook | None = None) -> None:
        self.app = app
        self.default = (limit_name, max_body_bytes)
        self.path_caps = dict(path_caps or {})
        self.drain_factor = drain_factor
        self.body_timeout_s = body_timeout_s
        self.timeout_name = timeout_name
        self.on_refusal = on_refusal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        name, cap = self.path_caps.get(scope.get("path", ""), self.default)
        declared = _content_length(scope)
        deadline = None
        if self.body_timeout_s is not None and not BODY_IN_MEMORY.get():
            deadline = asyncio.get_running_loop().time() + self.body_timeout_s
        # what arrived of a body not yet complete, kept only for the hook's digest of a refusal
        # (references to the chunks the app holds anyway; dropped once the body is complete)
        arrived: list[bytes] | None = [] if self.on_refusal is not None else None
        if declared is not None and declared > cap:
            await self._reject(scope, receive, send, name, cap, declared, seen=0, done=False, deadline=deadline,
                               arrived=arrived)
            return
        seen = 0
        done = False
        started = False
        pending_body = bool(declared) or _is_chunked(scope)

        async def limited() -> Message:
            nonlocal seen, done
            msg = await receive() if done else await _receive_by(receive, deadline)
            if msg is None:
                raise _BodyTimedOut(seen)
            if msg["type"] == "http.request":
                chunk = msg.get("body", b"")
                seen += len(chunk)
                done = not msg.get("more_body", False)
                if arrived is not None:
                    arrived.append(chunk)
                if seen > cap:
                    raise _TooLarge(seen)
                if done and arrived is not None:
                    arrived.clear()
            return msg

        async def tracking_send(msg: Message) -> None:
            nonlocal started
            if msg["type"] == "http.response.start":
                started = True
                if pending_body and not done:  # a route that answers without reading the body (GET /health)
                    msg = _with_close(msg)
            await send(msg)

        try:
            await self.app(scope, limited, tracking_send)
        except _TooLarge as exc:
            if started:
                raise
            await self._reject(scope, receive, send, name, cap, exc.seen, seen=exc.seen, done=done, deadline=deadline,
                               arrived=arrived)
        except _BodyTimedOut as exc:
            if started:
                raise
            await self._timed_out(scope, send, declared, exc.seen, arrived)

    async def _reject(self, scope: Scope, receive: Receive, send: Send, name: str, cap: int, size: int, *, seen: int,
                      done: bool, deadline: float | None, arrived: list[bytes] | None) -> None:
        """The 413, after draining up to `drain_factor` × the cap (hashed for the hook when there is one, never kept)."""
        digest = None if arrived is None else hashlib.sha256(b"".join(arrived))
        bound = cap * self.drain_factor
        while not done and seen <= bound:
            msg = await _receive_by(receive, deadline)
            if msg is None or msg["type"] != "http.request":
                break
            chunk = msg.get("body", b"")
            if digest is not None:
                digest.update(chunk)
            seen += len(chunk)
            done = not msg.get("more_body", False)
        length = "declared as 10^18 bytes or more" if size >= _DECLARED_TOO_LONG else f"{max(size, seen)} bytes"
        answer = LimitExceeded(413, name, "body", f"request body is {length}; the limit is {cap}").body()
        body = _json_bytes(answer)
        if self.on_refusal is not None and digest is not None:
            self.on_refusal(scope.get("path", ""), 413, digest.hexdigest(), answer, body)
        await _send_body(send, 413, body, close=not done)

    async def _timed_out(self, scope: Scope, send: Send, declared: int | None, seen: int,
                         arrived: list[bytes] | None) -> None:
        """The 408: its detail is a function of the limit and the bytes that arrived, never of a clock reading."""
        got = f"{seen} of {declared} declared bytes" if declared is not None else f"{seen} bytes"
        answer = LimitExceeded(408, self.timeout_name, "body",
                               f"not complete within the limit of {self.body_timeout_s:g} s: "
                               f"{got} arrived").body()
        body = _json_bytes(answer)
        if self.on_refusal is not None and arrived is not None:
            self.on_refusal(scope.get("path", ""), 408, hashlib.sha256(b"".join(arrived)).hexdigest(), answer, body)
        await _send_body(send, 408, body, close=True)


def _is_chunked(scope: Scope) -> bool:
    return any(key == b"transfer-encoding" and b"chunked" in value.lower() for key, value in scope.get("headers", []))


def _with_close(start: Message) -> Message:
    """`start` asking the client to close: the unread rest of its body would otherwise keep the connection
    open (the ASGI server waits for it before the next request, with no deadline once the route has answered)."""
    headers = list(start.get("headers", []))
    if any(key.lower() == b"connection" for key, _ in headers):
        return start
    return {**start, "headers": [*headers, (b"connection", b"close")]}


#: What `_content_length` reads a declared length of more than 18 significant digits as: over every cap,
#: and never converted (a header line may hold thousands of digits; `int()` refuses over 4300).
_DECLARED_TOO_LONG = 10**18


def _content_length(scope: Scope) -> int | None:
    for key, value in scope.get("headers", []):
        if key == b"content-length":
            if not value.isdigit():
                return None
            digits = value.lstrip(b"0") or b"0"
            return int(digits) if len(digits) <= 18 else _DECLARED_TOO_LONG
    return None


class ErrorGuardMiddleware:
    """A server bug answers a JSON 500 naming the exception type, and the connection stays open.

    (Starlette's own handler re-raises, which makes the ASGI server close a keep-alive connection
    under the client's next request.) The traceback goes to the ``compactsim.mock_servers`` logger.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(msg: Message) -> None:
            nonlocal started
            if msg["type"] == "http.response.start":
                started = True
            await send(msg)

        try:
            await self.app(scope, receive, tracking_send)
        except ClientDisconnect:  # the client left mid-body (or sent a bad chunk): no one to answer, nothing broke
            _log.debug("client disconnected before its request was read: %s %s", scope.get("method"), scope.get("path"))
        except Exception as exc:  # noqa: BLE001 - the point is to answer instead of dropping the connection
            if started or _is_transport_signal(exc):
                raise
            _log.exception("unhandled error answering %s %s", scope.get("method"), scope.get("path"))
            await send_json(send, 500, {"detail": f"internal error: {type(exc).__name__}", "limit": None, "field": None})


def _is_transport_signal(exc: BaseException) -> bool:
    """Exceptions that must reach the caller as they are (the in-process client's read timeout)."""
    return type(exc).__module__.startswith("httpx")


# ---------------------------------------------------------------------------------------------- threads


#: The handlers' home: one shared worker loop keeps the serving loop free at the price of a queue
#: hop (a thread and an event loop per request cost more than the scripted handler itself).
_WORKER = LoopThread("compactsim-handlers")


#: False while an in-process transport serves the request: its loop serves that one client, so
#: there is no `/health` to keep answering and the hop to the worker loop is pure cost.
OFFLOAD_HANDLERS: contextvars.ContextVar[bool] = contextvars.ContextVar("compactsim_offload_handlers", default=True)


async def run_off_loop(make: Callable[[], Awaitable[T]]) -> T:
    """Await ``make()`` on the shared worker loop (another thread); cancelling the caller cancels it.

    CPU-bound steps inside (JSON, rendering, generation, serialising) then never stall the
    serving loop: `/health` answers while a large request is being worked on. The Python GIL is
    still shared, so a single long C call can delay the loop by its own duration; the limits keep
    those calls small. Inline when `OFFLOAD_HANDLERS` is off (an in-process client).
    """
    if not OFFLOAD_HANDLERS.get():
        return await make()
    future = asyncio.run_coroutine_threadsafe(make(), _WORKER.loop())  # type: ignore[arg-type]
    try:
        return await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        future.cancel()  # cancels the task on the worker loop
        raise


__all__ = [
    "BODY_IN_MEMORY",
    "BodyLimitMiddleware",
    "BodyRefusalHook",
    "ErrorGuardMiddleware",
    "JsonLimits",
    "LimitExceeded",
    "OFFLOAD_HANDLERS",
    "check_tree",
    "field_path",
    "load_json",
    "run_off_loop",
    "send_json",
]
