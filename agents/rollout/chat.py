"""The chat-completions route to a model: Responses items → vLLM chat messages, and the answer back.

Gym's `vllm_model_with_compaction` converts each `/v1/responses` request to a Chat Completions
call with ``logprobs``, ``return_token_ids`` and ``return_tokens_as_token_ids`` on, forwards
`required_prefix_token_ids` verbatim, and turns the completion back into Responses output items
with the token fields on the **last** item. The agent takes this route by default
(`RolloutSpec.endpoint = "chat"`), so its evidence is Gym's (`gym_response`); the responses route
gives the same tokens, so the same traces, with the ids a responses-native server mints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from compactsim.agents.rollout.gym_response import ECHOED_FIELDS, UNSET_FIELDS, IdMint, derived_id, response_usage

_ASSISTANT_SIDE = ("reasoning", "function_call")


def _chat_part(part: Any) -> Any:
    if not isinstance(part, Mapping):
        return part
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text"):
        return {"type": "text", "text": part.get("text", "")}
    if kind in ("input_image", "image_url", "image"):
        url = part.get("image_url")
        if isinstance(url, Mapping):
            return {"type": "image_url", "image_url": dict(url)}
        image: dict[str, Any] = {"url": url}
        if part.get("detail") is not None:
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    return dict(part)


def _content(content: Any) -> Any:
    return [_chat_part(p) for p in content] if isinstance(content, list) else content


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [] if isinstance(p, Mapping))


def _reasoning_text(item: Mapping[str, Any]) -> str:
    for key in ("summary", "content"):
        parts = item.get(key)
        if parts:
            return "".join(p.get("text", "") for p in parts if isinstance(p, Mapping))
    return ""


def items_to_messages(items: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Responses input items → chat messages; consecutive assistant-side items become one message."""
    messages: list[dict[str, Any]] = []
    assistant: dict[str, Any] | None = None

    def flush() -> None:
        nonlocal assistant
        if assistant is not None:
            messages.append(assistant)
            assistant = None

    for item in items:
        kind = item.get("type", "message")
        role = item.get("role")
        if kind in _ASSISTANT_SIDE or (kind == "message" and role == "assistant"):
            if assistant is None:
                assistant = {"role": "assistant", "content": None}
            if kind == "reasoning":
                assistant["reasoning_content"] = (assistant.get("reasoning_content") or "") + _reasoning_text(item)
            elif kind == "function_call":
                assistant.setdefault("tool_calls", []).append({
                    "id": item.get("call_id"), "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments", "")},
                })
            else:
                assistant["content"] = (assistant.get("content") or "") + _text(item.get("content"))
            continue
        flush()
        if kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": _content(item.get("output"))})
        else:
            messages.append({"role": role or "user", "content": _content(item.get("content"))})
    flush()
    return messages


def chat_body(responses_body: Mapping[str, Any]) -> dict[str, Any]:
    """The chat request Gym's compaction model server builds from a Responses request."""
    body: dict[str, Any] = {
        "messages": items_to_messages(responses_body.get("input") or []),
        "logprobs": True,
        "top_logprobs": 0,
        "return_tokens_as_token_ids": True,
        "return_token_ids": True,
    }
    for key in ("model", "temperature", "top_p", "metadata", "tools"):
        if responses_body.get(key) is not None:
            body[key] = responses_body[key]
    if responses_body.get("max_output_tokens") is not None:
        body["max_tokens"] = responses_body["max_output_tokens"]
    if "required_prefix_token_ids" in responses_body:
        body["required_prefix_token_ids"] = responses_body["required_prefix_token_ids"]
    return body


def completion_to_response(
    data: Mapping[str, Any], request: Mapping[str, Any] | None = None, *, mint: IdMint = derived_id
) -> dict[str, Any]:
    """A chat completion → the `Response` Gym's model server returns for `request` (the Responses body).

    Items: reasoning, then the assistant message (also when nothing else came back), then one item
    per tool call whose item id is its ``call_id``; the token fields ride on the **last** item.
    The envelope echoes the request's sampling fields (`gym_response`). ``policy_version`` is kept
    for the call log only: Gym drops it.
    """
    request = request or {}
    choice = data["choices"][0]
    message = choice["message"]
    completion_id = str(data.get("id", "chatcmpl"))
    output: list[dict[str, Any]] = []
    if message.get("reasoning_content") is not None:
        output.append({"type": "reasoning", "id": mint("rs", completion_id, 0),
                       "summary": [{"type": "summary_text", "text": message["reasoning_content"]}]})
    calls = message.get("tool_calls") or []
    if message.get("content") or not (output or calls):
        output.append({"type": "message", "id": mint("msg", completion_id, 0), "role": "assistant",
                       "status": "completed",
                       "content": [{"type": "output_text", "text": message.get("content") or "", "annotations": []}]})
    for call in calls:
        fn = call.get("function") or {}
        output.append({"type": "function_call", "id": call.get("id"), "call_id": call.get("id"),
                       "name": fn.get("name"), "arguments": fn.get("arguments", ""), "status": "completed"})
    last = output[-1]
    if "prompt_token_ids" in data:
        last["prompt_token_ids"] = list(data["prompt_token_ids"])
    if "token_ids" in choice:
        last["generation_token_ids"] = list(choice["token_ids"])
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, Mapping) and isinstance(logprobs.get("content"), list):
        last["generation_log_probs"] = [entry.get("logprob") for entry in logprobs["content"]]
    last["routed_experts"] = message.get("routed_experts")
    length = choice.get("finish_reason") == "length"
    response: dict[str, Any] = {field: request.get(field) for field in ECHOED_FIELDS} | dict.fromkeys(UNSET_FIELDS)
    created = data.get("created", 0)
    response.update({
        "id": mint("resp", completion_id, 0),
        "object": "response",
        "created_at": float(created) if isinstance(created, (int, float)) else 0.0,
        "model": request.get("model") or data.get("model"),
        "status": "incomplete" if length else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if length else None,
        "output": output,
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "tool_choice": request.get("tool_choice") if request.get("tool_choice") is not None else "auto",
        "tools": list(request.get("tools") or []),
        "usage": response_usage(data.get("usage")),
        "policy_version": data.get("policy_version"),
    })
    return response


__all__ = ["chat_body", "completion_to_response", "items_to_messages"]
