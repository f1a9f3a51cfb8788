"""The model server's request limits, checked at the HTTP boundary before the request pipeline runs.

`handle(state, endpoint, raw)` is what the JSON routes call: on a worker thread (see
`compactsim.mock_servers.limits.run_off_loop`) it decodes the body under the JSON caps, checks the
model-server limits below, and only then hands the raw body to `ServerState` (parse → render →
generate → serialise, unchanged). A refusal is a 4xx ``{"detail", "limit", "field"}`` answer,
recorded in the request log like any other refusal.

Model-server limits (names as in `settings.Limits`):

- ``max_body_bytes`` and ``body_timeout_s``: enforced before any route runs
  (`compactsim.mock_servers.limits.BodyLimitMiddleware`); their 413 and 408 are logged here
  (`log_body_refusal`) with the digest of the body bytes read before answering.
- ``max_prompt_tokens``: the tokenizer is byte-level without merges, so a prompt renders to at
  least one token per UTF-8 byte of its text; a body whose text alone exceeds the cap is
  refused before it is rendered (the engine still checks the exact count after rendering).
  The same cap applies to `/tokenize`.
- ``max_prompt_tokens`` also bounds ``required_prefix_token_ids`` (a longer prefix can never match).
- ``string_fields``: ``role`` and ``type`` inside the prompt are strings (or null) when given.
- ``max_metadata_value_chars``: each string value in ``metadata`` (OpenAI caps them at 512);
  ``compactsim_turn`` / ``compactsim_attempt`` given as strings must be ASCII decimal of at most
  ``max_int_digits`` digits.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.responses import Response

from compactsim.harness.core.digests import bytes_digest
from compactsim.mock_servers.limits import (
    BodyRefusalHook,
    JsonLimits,
    LimitExceeded,
    field_path,
    load_json,
    run_off_loop,
)
from compactsim.mock_servers.model_server.settings import Limits
from compactsim.mock_servers.model_server.state import ServerState, json_response

#: keys whose string values the chat template renders as text bytes (a lower bound on the prompt)
_TEXT_KEYS = frozenset({"text", "content", "output", "arguments"})
#: top-level fields that hold the prompt, per endpoint
_PROMPT_FIELDS = {"chat": ("messages",), "responses": ("input", "instructions"),
                  "tokenize": ("messages", "input", "instructions", "prompt")}
_INT_METADATA = ("compactsim_turn", "compactsim_attempt")
#: keys the chat template looks up in tables; anything but a string there is refused up front
_STRING_KEYS = ("role", "type")


def json_limits(limits: Limits) -> JsonLimits:
    return JsonLimits(max_depth=limits.max_json_depth, max_int_digits=limits.max_int_digits)


def _utf8_len(s: str) -> int:
    return len(s) if s.isascii() else len(s.encode("utf-8", "surrogatepass"))


def prompt_text_bytes(body: Mapping[str, Any], endpoint: str) -> tuple[int, str]:
    """(UTF-8 bytes of the text the template will render, path of the largest such string).

    Raises `LimitExceeded` for a ``role`` or ``type`` that is not a string (``string_fields``).

    Counts strings under text-bearing keys (and top-level string prompts) only; a reasoning item
    renders its summary *or* its content, so only the summary is counted when both exist. Every
    counted byte becomes a token, so the total is a lower bound on the rendered prompt length.
    """
    total, biggest, where = 0, -1, "body"
    stack: list[tuple[Any, tuple[str | int, ...], bool]] = []
    for name in _PROMPT_FIELDS[endpoint]:
        if name in body:
            stack.append((body[name], (name,), True))
    while stack:
        node, path, counted = stack.pop()
        if isinstance(node, str):
            if counted:
                n = _utf8_len(node)
                total += n
                if n > biggest:
                    biggest, where = n, field_path(path)
        elif isinstance(node, list):
            stack.extend((child, (*path, i), counted) for i, child in enumerate(node))
        elif isinstance(node, dict):
            for key in _STRING_KEYS:
                if key in node and not isinstance(node[key], str | None):
                    raise LimitExceeded(422, "string_fields", field_path((*path, key)),
                                        f"expected a string, found {type(node[key]).__name__}")
            skip = "content" if node.get("type") == "reasoning" and node.get("summary") else None
            for key, child in node.items():
                if key != skip:
                    stack.append((child, (*path, key), key in _TEXT_KEYS))
    return total, where


def check_request(body: Any, endpoint: str, limits: Limits) -> None:
    """The model-server limits on a decoded body (shape errors are left to the schema's 422)."""
    if not isinstance(body, dict):
        return
    text, where = prompt_text_bytes(body, endpoint)
    if text > limits.max_prompt_tokens:
        raise LimitExceeded(422, "max_prompt_tokens", where,
                            f"the prompt's text is {text} UTF-8 bytes, so it renders to at least {text} tokens; "
                            f"the limit is {limits.max_prompt_tokens}")
    prefix = body.get("required_prefix_token_ids")
    if isinstance(prefix, list) and len(prefix) > limits.max_prompt_tokens:
        raise LimitExceeded(422, "max_prompt_tokens", "required_prefix_token_ids",
                            f"{len(prefix)} ids; the limit is {limits.max_prompt_tokens}")
    metadata = body.get("metadata")
    if isinstance(metadata, dict):
        for key, value in metadata.items():
            if isinstance(value, str) and len(value) > limits.max_metadata_value_chars:
                raise LimitExceeded(422, "max_metadata_value_chars", field_path(("metadata", key)),
                                    f"{len(value)} characters; the limit is {limits.max_metadata_value_chars}")
        for key in _INT_METADATA:
            value = metadata.get(key)
            if isinstance(value, str) and value.isdigit() and not (value.isascii() and len(value) <= limits.max_int_digits):
                raise LimitExceeded(422, "max_int_digits", field_path(("metadata", key)),
                                    f"expected ASCII decimal digits, at most {limits.max_int_digits} of them")


def reject(state: ServerState, endpoint: str, raw: bytes, exc: LimitExceeded) -> Response:
    """The 4xx answer for `exc`, logged like the pipeline's own refusals."""
    resp = json_response(exc.body(), exc.status)
    state.log.record(endpoint=endpoint, status=exc.status, request_digest=bytes_digest(raw),
                     response_digest=bytes_digest(resp.body), policy_version=state.engine.policy_version,
                     detail=exc.body()["detail"])
    return resp


#: the routes whose answers the request log records (their `endpoint` names); `/weights` and the GET routes keep none
LOGGED_PATHS = {"/v1/chat/completions": "chat", "/v1/responses": "responses", "/tokenize": "tokenize"}


def log_body_refusal(state: ServerState) -> BodyRefusalHook:
    """The hook that logs the HTTP boundary's own refusals (413 body over its cap, 408 body not complete
    in time) like the routes' refusals: the request digest is that of the body bytes read before
    answering (what arrived, plus what the 413's drain read), the detail is the answer's."""

    def record(path: str, status: int, arrived_digest: str, answer: dict[str, Any], body: bytes) -> None:
        endpoint = LOGGED_PATHS.get(path)
        if endpoint is not None:
            state.log.record(endpoint=endpoint, status=status, request_digest=arrived_digest,
                             response_digest=bytes_digest(body), policy_version=state.engine.policy_version,
                             detail=answer["detail"])

    return record


async def handle(state: ServerState, endpoint: str, raw: bytes) -> Response:
    """Limits, then the request pipeline, all off the serving loop; `endpoint`: chat, responses or tokenize."""
    limits = state.settings.limits

    async def work() -> Response:
        decoded = None
        try:
            decoded = load_json(raw, json_limits(limits))
            check_request(decoded, endpoint, limits)
        except LimitExceeded as exc:
            if exc.limit != "json_syntax":  # malformed JSON keeps the pipeline's FastAPI-shaped 422
                return reject(state, endpoint, raw, exc)
        if endpoint == "tokenize":
            return await state.tokenize(raw, decoded)
        return await state.generate(endpoint, raw, decoded)

    return await run_off_loop(work)


__all__ = ["LOGGED_PATHS", "check_request", "handle", "json_limits", "log_body_refusal", "prompt_text_bytes", "reject"]
