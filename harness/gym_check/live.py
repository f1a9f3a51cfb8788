"""Live mode: scripted rollouts run through the revision's own `ContextCompactionSession`.

A `LiveScript` says what the model answers at each call (output items, sampled ids, logprobs)
and what the tools observe; the revision's session decides the views, boundaries and ids.
Prompts follow the revision's verdict: an append-compatible call's prompt is its required prefix
plus `prompt_suffix` (the observation tokens); after a rewrite it is `rewrite_prompt_token_ids`
(a re-rendered prompt). `expect_append_compatible` records what the script's author expects, so
a revision whose policy compacts elsewhere is reported.

Our emitter is compared through a hook: any callable `emit(script: LiveScript) -> dict` that
returns the transport payload our agents produce for the same script (`--emitter module:attr`).
"""

from __future__ import annotations

import base64
import importlib
import struct
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from compactsim.harness.core.errors import ConfigError

#: Where the runner looks for our emitter's live-script entry point when none is given.
DEFAULT_EMITTER_HOOK = "compactsim.agents.evidence.live:emit_live_script"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LiveCall(_Strict):
    """One model call of a script and the observations that follow it."""

    output: list[dict[str, Any]] = Field(min_length=1, description="output items; tokens go on the last one")
    generation_token_ids: list[int]
    generation_log_probs: list[float]
    prompt_token_ids: list[int] | None = Field(default=None, description="force this prompt (Gym checks any prefix)")
    prompt_suffix: list[int] = Field(default_factory=list, description="appended to the required prefix")
    rewrite_prompt_token_ids: list[int] | None = Field(default=None, description="the prompt after a rewrite")
    observations: list[list[dict[str, Any]]] = Field(default_factory=list)
    expect_append_compatible: bool | None = None
    incomplete_reason: str | None = None


class LiveScript(_Strict):
    """A scripted rollout: request, compaction config, and the model's answers call by call."""

    name: str
    rollout_id: str
    group_id: str | None = None
    task_id: str | None = None
    rollout_index: int | None = None
    attempt_index: int | None = None
    model: str = "policy"
    created_at: float = 1.0
    reward: float = 1.0
    model_server: dict[str, Any] = Field(
        default_factory=lambda: {"type": "responses_api_models", "name": "policy_model_for_compaction"}
    )
    request: dict[str, Any]
    context_history: dict[str, Any]
    calls: list[LiveCall] = Field(min_length=1)

    def to_checker(self) -> dict[str, Any]:
        """The JSON the checker's `live` op reads (it falls back to the rewrite prompt itself)."""
        data = self.model_dump(mode="json")
        for call in data["calls"]:
            if call["prompt_token_ids"] is None:
                call.pop("prompt_token_ids")
        return data


# ---------------------------------------------------------------------------------------------
# synthetic media


def png_data_url(width: int, height: int, rgb: tuple[int, int, int]) -> str:
    """A solid-colour RGB PNG as a data URL, built with zlib (deterministic bytes)."""

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    png = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _screen(turn: int, url: str) -> list[dict[str, Any]]:
    return [{"type": "message", "role": "user", "content": [
        {"type": "input_image", "image_url": url, "detail": "auto"},
        {"type": "input_text", "text": f"screen {turn}"},
    ]}]


def _reasoning(turn: int, text: str) -> dict[str, Any]:
    return {"id": f"rs_{turn}", "type": "reasoning", "summary": [{"type": "summary_text", "text": text}]}


def _call(turn: int, name: str, arguments: str = "{}") -> dict[str, Any]:
    return {"id": f"fc_{turn}", "type": "function_call", "call_id": f"call_{turn}", "name": name,
            "arguments": arguments, "status": "completed"}


def _message(turn: int, text: str) -> dict[str, Any]:
    return {"id": f"msg_{turn}", "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


#: The reference §8 one-pixel PNG, so `reasoning-recency` reproduces the shared example exactly.
REFERENCE_PNG = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
)


def reasoning_recency() -> LiveScript:
    """Reference §8: reasoning recency (keep last block) rewrites before call 3; one image carried."""
    return LiveScript(
        name="reasoning-recency",
        rollout_id="rollout-demo-0", group_id="group-demo", task_id="task-demo", rollout_index=0, attempt_index=0,
        request={"input": "Open the settings app.", "temperature": 1.0},
        context_history={"enabled": True, "schedule": {"type": "rolling_recency"},
                         "policy": {"type": "recency", "config": {"reasoning": {"enabled": True, "keep_last_blocks": 1}}}},
        calls=[
            LiveCall(output=[_reasoning(1, "need a screenshot"), _call(1, "screenshot")],
                     prompt_token_ids=[1, 2, 3], generation_token_ids=[11, 12], generation_log_probs=[-0.5, -0.25],
                     observations=[_screen(1, REFERENCE_PNG)], expect_append_compatible=False),
            LiveCall(output=[_reasoning(2, "click the gear"), _call(2, "click", '{"x": 5}')],
                     prompt_suffix=[4, 900, 5], generation_token_ids=[21, 22], generation_log_probs=[-0.125, -1.0],
                     observations=[[{"type": "function_call_output", "call_id": "call_2", "output": "clicked"}]],
                     expect_append_compatible=True),
            LiveCall(output=[_message(3, "Settings is open.")],
                     rewrite_prompt_token_ids=[1, 2, 3, 12, 4, 900, 5, 21, 22, 6, 7],
                     generation_token_ids=[31, 32, 33], generation_log_probs=[-0.1, -0.2, -0.3],
                     expect_append_compatible=False),
        ],
    )


def no_compaction() -> LiveScript:
    """Identity policy: every call extends the previous one; one physical trace."""
    url = png_data_url(2, 2, (200, 30, 30))
    return LiveScript(
        name="no-compaction",
        rollout_id="rollout-live-identity", group_id="group-live", task_id="task-live", rollout_index=0, attempt_index=0,
        request={"input": "Find the clock.", "temperature": 1.0},
        context_history={"enabled": True, "policy": {"type": "identity"}},
        calls=[
            LiveCall(output=[_reasoning(1, "look first"), _call(1, "screenshot")], prompt_token_ids=[1, 2, 3],
                     generation_token_ids=[11, 12], generation_log_probs=[-0.5, -0.25],
                     observations=[_screen(1, url)], expect_append_compatible=False),
            LiveCall(output=[_call(2, "click", '{"x": 1}')], prompt_suffix=[4, 900, 5],
                     generation_token_ids=[21, 22], generation_log_probs=[-0.75, -1.0],
                     observations=[[{"type": "function_call_output", "call_id": "call_2", "output": "clicked"}]],
                     expect_append_compatible=True),
            LiveCall(output=[_message(3, "The clock is open.")], prompt_suffix=[6, 7],
                     generation_token_ids=[31, 32, 33], generation_log_probs=[-0.1, -0.2, -0.3],
                     expect_append_compatible=True),
        ],
    )


def image_recency_k2() -> LiveScript:
    """Image recency, keep the last 2 observation groups: the oldest screen is dropped before call 4."""
    colours = [(255, 0, 0), (0, 160, 0), (0, 0, 255), (240, 200, 0)]
    calls = []
    for turn in range(1, 5):
        calls.append(LiveCall(
            output=[_call(turn, "screenshot")],
            prompt_token_ids=[1, 2, 3] if turn == 1 else None,
            prompt_suffix=[100 + turn, 900, 5],
            rewrite_prompt_token_ids=[1, 2, 3, 60 + turn, 900, 5, 70 + turn],
            generation_token_ids=[10 * turn + 1, 10 * turn + 2],
            generation_log_probs=[-0.25 * turn, -0.5],
            observations=[_screen(turn, png_data_url(2, 2, colours[turn - 1]))],
            expect_append_compatible=turn in (2, 3),
        ))
    calls.append(LiveCall(
        output=[_message(5, "Done.")], prompt_suffix=[105, 900, 5], rewrite_prompt_token_ids=[1, 2, 3, 65, 900, 5, 75],
        generation_token_ids=[51, 52], generation_log_probs=[-0.5, -0.5], expect_append_compatible=False,
    ))
    return LiveScript(
        name="image-recency-k2",
        rollout_id="rollout-live-images", group_id="group-live", task_id="task-live", rollout_index=1, attempt_index=0,
        request={"input": "Watch the screens.", "temperature": 1.0},
        context_history={"enabled": True, "schedule": {"type": "rolling_recency"},
                         "policy": {"type": "recency", "config": {"images": {"enabled": True, "keep_last_groups": 2}}}},
        calls=calls,
    )


#: The built-in live scenarios, by name.
SCENARIOS: dict[str, Callable[[], LiveScript]] = {
    "no-compaction": no_compaction,
    "image-recency-k2": image_recency_k2,
    "reasoning-recency": reasoning_recency,
}


def scenarios(names: list[str] | None = None) -> list[LiveScript]:
    if not names:
        return [factory() for factory in SCENARIOS.values()]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise ConfigError("invalid_argument", f"unknown live scenario(s) {unknown}; known: {sorted(SCENARIOS)}")
    return [SCENARIOS[n]() for n in names]


# ---------------------------------------------------------------------------------------------
# field-by-field comparison


@dataclass(frozen=True, slots=True)
class FieldDiff:
    """One place where two payloads disagree."""

    path: str
    real: Any
    ours: Any

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "real": self.real, "ours": self.ours}


_MISSING = "<absent>"


def compare_payloads(real: Any, ours: Any, *, path: str = "", limit: int = 200, strict: bool = False) -> list[FieldDiff]:
    """Every leaf where `ours` differs from `real`.

    Lenient (default): absent and null keys count as equal. `strict`: they do not, and a number
    must have the same JSON type too (``0`` vs ``0.0``, ``1`` vs ``true``).
    """
    out: list[FieldDiff] = []

    def walk(a: Any, b: Any, where: str) -> None:
        if len(out) >= limit:
            return
        if strict and _json_type(a) != _json_type(b):
            out.append(FieldDiff(where or "<root>", a, b))
            return
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            for key in sorted(set(a) | set(b), key=str):
                va, vb = a.get(key), b.get(key)
                if va is None and vb is None and not strict:
                    continue
                walk(a[key] if key in a else _MISSING, b[key] if key in b else _MISSING, f"{where}.{key}" if where else str(key))
        elif isinstance(a, list | tuple) and isinstance(b, list | tuple):
            if len(a) != len(b):
                out.append(FieldDiff(f"{where}.length", len(a), len(b)))
            for i, (x, y) in enumerate(zip(a, b, strict=False)):
                walk(x, y, f"{where}[{i}]")
        elif a != b:
            out.append(FieldDiff(where or "<root>", a, b))

    walk(real, ours, path)
    return out


def _json_type(value: Any) -> str:
    if value is _MISSING:
        return "absent"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    return type(value).__name__


def load_hook(spec: str) -> Callable[[LiveScript], Mapping[str, Any]] | None:
    """Resolve `module:attr`; None when the module or attribute does not exist (yet)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError("invalid_argument", f"--emitter must be module:attr, got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            return None
        raise
    hook = getattr(module, attr, None)
    return hook if callable(hook) else None


__all__ = [
    "DEFAULT_EMITTER_HOOK",
    "REFERENCE_PNG",
    "SCENARIOS",
    "FieldDiff",
    "LiveCall",
    "LiveScript",
    "compare_payloads",
    "image_recency_k2",
    "load_hook",
    "no_compaction",
    "png_data_url",
    "reasoning_recency",
    "scenarios",
]
