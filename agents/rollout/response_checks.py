"""Why a 200 answer from a model or reward server cannot be used, named by its field (None when it can).

The agent reads these bodies field by field: it turns a chat completion into Responses items,
copies the token fields into the call's evidence, echoes text and ids into the next request and
reads the reward. A server that answers with another type where one is expected (a tool call
that is a number, token ids that are strings, a reward that is a list) would otherwise surface
as a `TypeError` deep in the agent. `post_json` retries such an answer and then ends the
rollout as ``malformed_response``, naming the field and the turn.

Only what the agent itself reads is checked; the contents of the evidence (routes, token
counts, prefixes) are the planner's and the session's to judge.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from compactsim.agents.items import TOKEN_FIELDS


def _kind(value: Any) -> str:
    return type(value).__name__


def _int_list(value: Any, path: str) -> str | None:
    if not isinstance(value, list):
        return f"{path}: expected a list of token ids, found {_kind(value)}"
    if set(map(type, value)) <= {int}:  # the common case, without a Python-level loop
        return None
    for i, v in enumerate(value):
        if type(v) is not int:  # bool is an int subclass, and no token id
            return f"{path}[{i}]: expected an int token id, found {_kind(v)}"
    return None


def _number_list(value: Any, path: str) -> str | None:
    if not isinstance(value, list):
        return f"{path}: expected a list of logprobs, found {_kind(value)}"
    if set(map(type, value)) <= {int, float}:
        return None
    for i, v in enumerate(value):
        if type(v) not in (int, float):
            return f"{path}[{i}]: expected a number, found {_kind(v)}"
    return None


def _optional_str(holder: Mapping[str, Any], key: str, path: str) -> str | None:
    value = holder.get(key)
    if value is not None and not isinstance(value, str):
        return f"{path}.{key}: expected a string or null, found {_kind(value)}"
    return None


def lone_surrogate_problem(raw: bytes, data: Any) -> str | None:
    """A string holding a lone UTF-16 surrogate (JSON escape ``\\ud800``): no UTF-8 request can carry it onward.

    Valid JSON and valid for Python, but the agent echoes the text into its next request, whose
    encoding would fail. Escapes only appear with a ``\\u`` in the raw bytes, so the full check
    runs only then.
    """
    if b"\\ud" not in raw and b"\\uD" not in raw:
        return None
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"a string holds a lone UTF-16 surrogate ({exc.object[exc.start:exc.end]!a}), which is not text"
    return None


def chat_completion_problem(data: Any) -> str | None:
    """A vLLM chat completion, as far as the agent reads it: the first choice's message, tool calls and token fields."""
    if not isinstance(data, dict) or not isinstance(data.get("choices"), list) or not data["choices"]:
        return "expected a chat completion with at least one choice"
    choice = data["choices"][0]
    if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
        return "choices[0].message is missing"
    message = choice["message"]
    path = "choices[0].message"
    for key in ("content", "reasoning_content"):
        problem = _optional_str(message, key, path)
        if problem:
            return problem
    calls = message.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        return f"{path}.tool_calls: expected a list or null, found {_kind(calls)}"
    for j, call in enumerate(calls or []):
        cpath = f"{path}.tool_calls[{j}]"
        if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
            return f"{cpath}.function: expected an object with name and arguments"
        problem = _optional_str(call, "id", cpath)
        if problem:
            return problem
        for key in ("name", "arguments"):
            if not isinstance(call["function"].get(key), str):
                return f"{cpath}.function.{key}: expected a string, found {_kind(call['function'].get(key))}"
    if "prompt_token_ids" in data:
        problem = _int_list(data["prompt_token_ids"], "prompt_token_ids")
        if problem:
            return problem
    if "token_ids" in choice:
        problem = _int_list(choice["token_ids"], "choices[0].token_ids")
        if problem:
            return problem
    logprobs = choice.get("logprobs")
    if logprobs is not None:
        if not isinstance(logprobs, dict):
            return f"choices[0].logprobs: expected an object or null, found {_kind(logprobs)}"
        content = logprobs.get("content")
        if content is not None and not isinstance(content, list):
            return f"choices[0].logprobs.content: expected a list or null, found {_kind(content)}"
        for i, entry in enumerate(content or []):
            if not isinstance(entry, dict) or type(entry.get("logprob")) not in (int, float):
                return f"choices[0].logprobs.content[{i}].logprob: expected a number"
    return None


def responses_problem(data: Any) -> str | None:
    """A Responses object, as far as the agent reads it: typed output items and the token fields' element types."""
    if not isinstance(data, dict):
        return f"expected a JSON object, found {_kind(data)}"
    output = data.get("output")
    if not isinstance(output, list) or not all(isinstance(it, dict) and "type" in it for it in output):
        return "field 'output' is not a list of typed items"
    for i, item in enumerate(output):
        problem = output_item_problem(item, f"output[{i}]")
        if problem:
            return problem
    incomplete = data.get("incomplete_details")
    if incomplete is not None and not isinstance(incomplete, dict):
        return f"incomplete_details: expected an object or null, found {_kind(incomplete)}"
    return None


def output_item_problem(item: Mapping[str, Any], path: str) -> str | None:
    """One output item: the strings a function call is answered by, and the element types of its token fields."""
    if item.get("type") == "function_call":
        for key in ("call_id", "name", "arguments"):
            if not isinstance(item.get(key), str):
                return f"{path}.{key}: expected a string, found {_kind(item.get(key))}"
    prompt, sampled, logprobs = TOKEN_FIELDS
    for key in (prompt, sampled):
        if key in item:
            problem = _int_list(item[key], f"{path}.{key}")
            if problem:
                return problem
    if logprobs in item:
        return _number_list(item[logprobs], f"{path}.{logprobs}")
    return None


def reward_problem(data: Any) -> str | None:
    """A `/verify` answer: a finite numeric reward and, when given, an object of instance flags."""
    if not isinstance(data, dict) or "reward" not in data:
        return "no 'reward' field"
    reward = data["reward"]
    if type(reward) not in (int, float) or not math.isfinite(reward):
        return f"reward: expected a finite number, found {reward!r}"[:200]
    instance = data.get("instance_config")
    if instance is not None:
        if not isinstance(instance, dict):
            return f"instance_config: expected an object or null, found {_kind(instance)}"
        flag = instance.get("mask_sample")
        if flag is not None and not isinstance(flag, bool):
            return f"instance_config.mask_sample: expected a boolean, found {_kind(flag)}"
    return None


__all__ = ["chat_completion_problem", "lone_surrogate_problem", "output_item_problem", "responses_problem", "reward_problem"]
