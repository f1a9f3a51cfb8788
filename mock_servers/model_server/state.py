"""Per-app server state and the request pipeline shared by the generation endpoints.

parse body -> digest -> render -> hints -> media/prefix checks -> call key -> faults -> generate ->
content faults -> serialise -> transport faults -> log. The call key (rollout, turn, attempt) is
derived from the request itself by a per-rollout `CallTracker` (metadata hints override it), so
the answer is a function of (settings, body, that rollout's earlier calls, policy version): the
same episode always yields the same bytes, whatever the client and however rollouts interleave.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anyio
from pydantic import BaseModel, ValidationError
from starlette.responses import Response

from compactsim.harness.core import tokenizer as tok
from compactsim.harness.core.chat_template import Rendered, render_chat, render_prompt
from compactsim.harness.core.digests import bytes_digest, canonical_digest
from compactsim.harness.core.errors import ConfigError
from compactsim.mock_servers.model_server import serialize
from compactsim.mock_servers.model_server.engine import (
    CallKey,
    CallTracker,
    Engine,
    RequestRejected,
    apply_content_faults,
    call_digest,
    check_prefix,
    check_prompt_tokens,
    read_hints,
)
from compactsim.mock_servers.model_server.faults import NO_FAULTS, DroppedConnectionResponse, FaultPlan, TruncatedJSONResponse, select_faults
from compactsim.mock_servers.model_server.request_log import RequestLog
from compactsim.mock_servers.model_server.schemas import ChatCompletionRequest, ResponsesRequest, TokenizeRequest
from compactsim.mock_servers.model_server.settings import ServerSettings


def json_response(obj: Any, status: int = 200) -> Response:
    return Response(content=serialize.dumps(obj), status_code=status, media_type="application/json")


def _validation_detail(exc: ValidationError) -> list[dict[str, Any]]:
    """FastAPI's 422 shape: one entry per error, `loc` starting with "body"."""
    return [{"type": e["type"], "loc": ["body", *e["loc"]], "msg": e["msg"]} for e in exc.errors(include_url=False, include_context=False, include_input=False)]


def _prompt_field(req: BaseModel) -> str:
    """The request field holding the prompt, which a refusal over a prompt limit names."""
    if isinstance(req, ChatCompletionRequest):
        return "messages"
    if isinstance(req, ResponsesRequest):
        return "input"
    return next((k for k in ("messages", "input", "prompt") if getattr(req, k, None) is not None), "prompt")


class ServerState:
    """The engine, the call tracker, the request log and the handlers; one per app."""

    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self.engine = Engine(settings)
        self.calls = CallTracker()
        self.log = RequestLog(max_entries=settings.limits.max_log_entries, path=settings.request_log_path)

    # ------------------------------------------------------------------ parsing

    def parse(self, raw: bytes, model: type[BaseModel], decoded: Any = None) -> tuple[dict[str, Any], BaseModel, str]:
        """Raw body -> (JSON object, validated model, canonical digest); 422 on any problem.

        `decoded` is `raw` already decoded by the limits' reader (`handle`), which returns exactly what
        `json.loads` does for a body it accepts; None decodes here.
        """
        try:
            obj = json.loads(raw) if decoded is None else decoded
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, or an integer before the
            # syntax error that is too long for int() (the limits' reader reports the first of them, json_syntax)
            raise _Invalid([{"type": "json_invalid", "loc": ["body", exc.pos if hasattr(exc, "pos") else 0],
                             "msg": f"JSON decode error: {exc}"}]) from None
        if not isinstance(obj, dict):
            raise _Invalid([{"type": "model_attributes_type", "loc": ["body"], "msg": "expected a JSON object"}])
        try:
            req = model.model_validate(obj)
        except ValidationError as exc:
            raise _Invalid(_validation_detail(exc)) from None
        if getattr(req, "stream", False):
            raise _Invalid([{"type": "value_error", "loc": ["body", "stream"], "msg": "streaming is not supported"}])
        return obj, req, canonical_digest(obj)

    def render(self, req: BaseModel) -> Rendered:
        drift = self.settings.drift
        try:
            if isinstance(req, ChatCompletionRequest):
                return render_chat(req.messages, drift=drift)  # type: ignore[arg-type]
            if isinstance(req, ResponsesRequest):
                return render_prompt(req.input, drift=drift, instructions=req.instructions)  # type: ignore[arg-type]
            assert isinstance(req, TokenizeRequest)
            given = [k for k in ("messages", "input", "prompt") if getattr(req, k) is not None]
            if len(given) != 1:
                raise RequestRejected(422, f"body: give exactly one of messages, input, prompt (found {given or 'none'})")
            if req.messages is not None:
                return render_chat(req.messages, drift=drift, add_generation_prompt=req.add_generation_prompt)  # type: ignore[arg-type]
            if req.input is not None:
                from compactsim.harness.core.chat_template import render

                return render(req.input, drift=drift, add_generation_prompt=req.add_generation_prompt,  # type: ignore[arg-type]
                              instructions=req.instructions)
            return Rendered(token_ids=tuple(tok.encode_text(req.prompt or "")), images=())
        except ConfigError as exc:
            raise RequestRejected(422, exc.detail) from None

    # ------------------------------------------------------------------ endpoints

    async def tokenize(self, raw: bytes, decoded: Any = None) -> Response:
        try:
            _, req, digest = self.parse(raw, TokenizeRequest, decoded)
            rendered = self.render(req)
            field = _prompt_field(req)
            self.engine.check_media(rendered, field)
            check_prompt_tokens(rendered, self.settings.limits.max_prompt_tokens, field)
        except (_Invalid, RequestRejected) as exc:
            return self._reject("tokenize", raw, exc)
        body = {"tokens": list(rendered.token_ids), "count": len(rendered.token_ids),
                "max_model_len": self.settings.limits.max_prompt_tokens, "media_ids": list(rendered.media_ids),
                "policy_version": self.engine.policy_version}
        resp = json_response(body)
        self._log_ok("tokenize", digest, resp.body, NO_FAULTS, None, len(rendered.token_ids), None)
        return resp

    async def generate(self, endpoint: str, raw: bytes, decoded: Any = None) -> Response:
        """`endpoint` is "chat" or "responses"; `decoded` as in `parse`."""
        model = ChatCompletionRequest if endpoint == "chat" else ResponsesRequest
        try:
            obj, req, digest = self.parse(raw, model, decoded)
            rendered = self.render(req)
            field = _prompt_field(req)
            hints = read_hints(obj.get("metadata"))
            self.engine.check_media(rendered, field)
            check_prefix(rendered.token_ids, req.required_prefix_token_ids)  # type: ignore[attr-defined]
            cdigest = call_digest(obj)
            # only accepted requests count as calls: a rejected body is not an attempt of anything
            key = self.calls.key(obj, hints, cdigest)
            plan = select_faults(self.settings, request_digest=cdigest, endpoint=endpoint, key=key)
            if isinstance(req, ChatCompletionRequest):
                max_tokens = req.max_completion_tokens or req.max_tokens
                top_n = (req.top_logprobs or 0) if req.logprobs else 0
            else:
                max_tokens, top_n = req.max_output_tokens, req.top_logprobs or 0  # type: ignore[attr-defined]
            kwargs = dict(request_digest=digest, key=key, max_tokens=max_tokens, top_logprobs=top_n,
                          force_length="finish_length" in plan.content, field=field)
            if self.settings.mode == "policy":
                gen = await anyio.to_thread.run_sync(lambda: self.engine.generate(rendered, **kwargs))
            else:
                gen = self.engine.generate(rendered, **kwargs)
        except (_Invalid, RequestRejected) as exc:
            return self._reject(endpoint, raw, exc)
        gen = apply_content_faults(gen, plan.content)
        name = self.settings.model_name
        if isinstance(req, ChatCompletionRequest):
            body = serialize.chat_completion(gen, model=name, request_digest=digest, want_logprobs=req.logprobs,
                                             as_ids=req.return_tokens_as_token_ids, return_token_ids=req.return_token_ids,
                                             routes_format=self.settings.routed_experts_format)
        else:
            body = serialize.responses_body(gen, model=name, request_digest=digest, tools=req.tools,  # type: ignore[attr-defined]
                                            routes_format=self.settings.routed_experts_format)
        payload = serialize.dumps(body)
        if plan.delay_s:
            await asyncio.sleep(plan.delay_s)
        resp: Any = Response(content=payload, status_code=200, media_type="application/json")
        status = 200
        t = plan.transport
        if t is not None:
            if t.kind in ("http_500", "http_503"):
                status = int(t.kind[-3:])
                resp = json_response({"detail": f"injected fault: {t.kind}"}, status)
                payload = resp.body
            elif t.kind == "timeout":
                await asyncio.sleep(t.delay())
            elif t.kind == "truncated_json":
                resp = TruncatedJSONResponse(payload)
                payload = resp.body
            elif t.kind == "drop_connection":
                resp = DroppedConnectionResponse(payload)
                payload = payload[: len(payload) // 2]
        self._log_ok(endpoint, digest, payload, plan, gen.key, len(gen.prompt_ids), len(gen.sampled_ids), status=status,
                     version=gen.policy_version)
        return resp

    # ------------------------------------------------------------------ logging

    def _reject(self, endpoint: str, raw: bytes, exc: Exception) -> Response:
        if isinstance(exc, _Invalid):
            status, detail = 422, exc.detail
        else:
            assert isinstance(exc, RequestRejected)
            status, detail = exc.status_code, exc.detail
        over_limit = isinstance(exc, RequestRejected) and exc.limit is not None
        resp = json_response({"detail": detail, "limit": exc.limit, "field": exc.field} if over_limit else {"detail": detail},
                             status)
        try:
            req_digest = canonical_digest(json.loads(raw))
        except (ValueError, RecursionError):
            req_digest = bytes_digest(raw)
        self.log.record(endpoint=endpoint, status=status, request_digest=req_digest, response_digest=bytes_digest(resp.body),
                        policy_version=self.engine.policy_version, detail=detail if isinstance(detail, str) else json.dumps(detail))
        return resp

    def _log_ok(self, endpoint: str, digest: str, payload: bytes, plan: FaultPlan, key: CallKey | None,
                prompt_tokens: int | None, generated: int | None, *, status: int = 200, version: int | None = None) -> None:
        self.log.record(
            endpoint=endpoint, status=status, request_digest=digest, response_digest=bytes_digest(payload),
            policy_version=self.engine.policy_version if version is None else version,
            rollout_id=key.rollout_id if key is not None else None,
            turn=key.turn if key is not None else None,
            faults=plan.names, prompt_tokens=prompt_tokens, generated_tokens=generated,
            attempt=key.attempt if key is not None else None,
            key_source=_key_source(key),
        )


def _key_source(key: CallKey | None) -> str | None:
    """How the log entry's rollout/turn/attempt were learned, e.g. ``"rollout=metadata turn=derived attempt=derived"``."""
    if key is None:
        return None
    rollout = "metadata" if key.from_metadata else "task"
    return f"rollout={rollout} turn={key.turn_source} attempt={key.attempt_source}"


class _Invalid(Exception):
    """A 422 with FastAPI's structured detail list."""

    def __init__(self, detail: list[dict[str, Any]]) -> None:
        super().__init__(str(detail))
        self.detail = detail


__all__ = ["ServerState", "json_response"]
