"""Turn a `Generation` into vLLM chat-completion and Gym Responses JSON (plain dicts, stable bytes).

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

import json
from typing import Any

from compactsim.harness.core import tokenizer as tok
from compactsim.mock_servers.model_server.engine import Generation


def dumps(obj: Any) -> bytes:
    """Compact JSON bytes; UTF-8 kept unless text holds escaped raw bytes (lone surrogates)."""
    try:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(obj, ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode("ascii")


def _token_bytes(token_id: int) -> list[int]:
    if tok.is_special(token_id):
        return list(tok.SPECIAL_TOKENS[token_id].encode("utf-8"))
    return [token_id - tok.BYTE_OFFSET]


def _token_name(token_id: int, as_ids: bool) -> str:
    return f"token_id:{token_id}" if as_ids else tok.token_repr(token_id)


def _routes(gen: Generation) -> list | None:
    return None if gen.routes is None else gen.routes.tolist()


def chat_completion(gen: Generation, *, model: str, request_digest: str, want_logprobs: bool, as_ids: bool,
                    return_token_ids: bool) -> dict[str, Any]:
    """The vLLM chat-completion body for `gen`."""
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
        message["routed_experts"] = _routes(gen)
    logprobs = None
    if want_logprobs and gen.logprobs is not None:
        content = []
        for i, lp in enumerate(gen.logprobs):
            t = gen.sampled_ids[i]
            top = gen.top_logprobs[i] if i < len(gen.top_logprobs) else ()
            content.append({
                "token": _token_name(t, as_ids),
                "logprob": lp,
                "bytes": _token_bytes(t),
                "top_logprobs": [{"token": _token_name(j, as_ids), "logprob": v, "bytes": _token_bytes(j)} for j, v in top],
            })
        logprobs = {"content": content}
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


def responses_body(gen: Generation, *, model: str, request_digest: str, tools: list | None) -> dict[str, Any]:
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
    last["routed_experts"] = _routes(gen)
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


__all__ = ["chat_completion", "dumps", "responses_body"]
