"""Named compaction presets: short names like ``recency-images-k2-chunked3`` for `ContextHistoryConfig`s.

Grammar (dash-separated tokens, order free after the policy name)::

    identity
    recency (-images-k<K> [-nomarker] [-unprotected]) (-reasoning-last<K> [-first]) [-chunked<N>]
    summary [-at<T>]... [-keep<N>]                    default: -at3 -keep1
    tool-output-truncation [-max<N>] [-keep<N>]      default: -max16 -keep1
    think-strip [-keep<N>]                           default: -keep1

``-chunked<N>`` selects the `turn_chunked_recency` schedule with N actions per chunk (any
policy); otherwise the schedule is `rolling_recency`.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from compactsim.agents.compaction.config import ContextHistoryConfig
from compactsim.harness.core.errors import ConfigError

#: Presets worth listing (any name the grammar accepts works).
PRESETS: tuple[str, ...] = (
    "identity",
    "recency-images-k1",
    "recency-images-k2",
    "recency-images-k3",
    "recency-images-k2-chunked3",
    "recency-images-k2-nomarker",
    "recency-reasoning-last1",
    "recency-images-k2-reasoning-last1",
    "summary",
    "summary-at3-at5",
    "tool-output-truncation",
    "think-strip",
)

_NUM = re.compile(r"^([a-z]+)(\d+)$")
#: Digits a preset's number may have (K, N, T: turn and image counts)
MAX_NUMBER_DIGITS = 6


def _bad(name: str, why: str) -> ConfigError:
    return ConfigError("invalid_argument", f"policy preset {name!r}: {why}; examples: {', '.join(PRESETS[:6])}")


def policy_preset(name: str) -> ContextHistoryConfig:
    """The `ContextHistoryConfig` a preset name stands for; `ConfigError(invalid_argument)` if none."""
    tokens = name.strip().lower().split("-")
    schedule: dict[str, Any] = {"type": "rolling_recency", "actions_per_chunk": 1}
    rest: list[str] = []
    for tok in tokens:
        m = _NUM.match(tok)
        if m and len(m.group(2)) > MAX_NUMBER_DIGITS:  # a count no rollout reaches, and past Gym's JSON integer limit
            raise _bad(name, f"{tok[:40]!r}: a number in a preset name has at most {MAX_NUMBER_DIGITS} digits")
        if m and m.group(1) == "chunked":
            schedule = {"type": "turn_chunked_recency", "actions_per_chunk": int(m.group(2))}
        else:
            rest.append(tok)
    if not rest:
        raise _bad(name, "empty name")
    head, args = rest[0], rest[1:]
    if head == "identity" and not args:
        policy: dict[str, Any] = {"type": "identity", "config": {}}
    elif head == "recency":
        policy = {"type": "recency", "config": _recency(name, args)}
    elif head == "summary":
        policy = {"type": "summary", "config": _summary(name, args)}
    elif head == "tool" and args[:2] == ["output", "truncation"]:
        policy = {"type": "tool_output_truncation", "config": _numbers(name, args[2:], {"max": "max_chars", "keep": "keep_last"})}
    elif head == "think" and args[:1] == ["strip"]:
        policy = {"type": "think_strip", "config": _numbers(name, args[1:], {"keep": "keep_last_turns"})}
    else:
        raise _bad(name, f"unknown policy {head!r}")
    try:
        return ContextHistoryConfig.model_validate({"enabled": True, "policy": policy, "schedule": schedule})
    except ValidationError as exc:
        raise _bad(name, "; ".join(e["msg"] for e in exc.errors())) from None


def _recency(name: str, args: list[str]) -> dict[str, Any]:
    images: dict[str, Any] = {}
    reasoning: dict[str, Any] = {}
    kind = None
    for tok in args:
        m = _NUM.match(tok)
        if tok in ("images", "reasoning"):
            kind = tok
            (images if kind == "images" else reasoning)["enabled"] = True
        elif kind == "images" and m and m.group(1) == "k":
            images["keep_last_groups"] = int(m.group(2))
        elif kind == "images" and tok == "nomarker":
            images["omission_marker"] = None
        elif kind == "images" and tok == "unprotected":
            images["protect_initial_context"] = False
        elif kind == "reasoning" and m and m.group(1) == "last":
            reasoning["keep_last_blocks"] = int(m.group(2))
        elif kind == "reasoning" and tok == "first":
            reasoning["keep_first_block"] = True
        else:
            raise _bad(name, f"unexpected token {tok!r}")
    if not images and not reasoning:
        raise _bad(name, "recency needs -images-k<K> and/or -reasoning-last<K>")
    out: dict[str, Any] = {}
    if images:
        out["images"] = images
    if reasoning:
        out["reasoning"] = reasoning
    return out


def _summary(name: str, args: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    at: list[int] = []
    for tok in args:
        m = _NUM.match(tok)
        if m and m.group(1) == "at":
            at.append(int(m.group(2)))
        elif m and m.group(1) == "keep":
            out["keep_last_turns"] = int(m.group(2))
        else:
            raise _bad(name, f"unexpected token {tok!r}")
    if at:
        out["at_turns"] = at
    return out


def _numbers(name: str, args: list[str], fields: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for tok in args:
        m = _NUM.match(tok)
        if not m or m.group(1) not in fields:
            raise _bad(name, f"unexpected token {tok!r}")
        out[fields[m.group(1)]] = int(m.group(2))
    return out


__all__ = ["PRESETS", "policy_preset"]
