"""What a scripted rollout does: the model's scripted steps, the tools' scripted results, the rollout spec.

A `RolloutScript` is shared data: its turns (minus tool results) become the mock model server's
script table for the rollout (`server_steps()`), and the agent answers each tool call from the
same turn's `tool_results`. A `RolloutSpec` adds identity, seed, compaction config, evidence
flavour and sampling parameters; it is everything needed to replay one rollout.
"""

from __future__ import annotations

import json
from typing import Any, Literal, get_args

from pydantic import ConfigDict, Field, model_validator

from compactsim.agents.compaction.config import ContextHistoryConfig
from compactsim.agents.media.images import SHAPES, ImageRecipe, png_data_url, render_png
from compactsim.agents.items import input_image, input_text, user_message
from compactsim.harness.core.config_model import NoBooleanNumbers
from compactsim.harness.core.evidence import FLAVOURS
from compactsim.harness.core.seeds import check_seed, derive_int

Flavour = Literal["gym-0.7.0-transport", "gym-0.7.0-full", "gym-pr2870", "osworld", "none"]
#: Gym's model server reference for the compaction model (feeds `model_contract_id`).
DEFAULT_MODEL_SERVER: dict[str, str] = {"type": "responses_api_models", "name": "policy_model_for_compaction"}


assert set(FLAVOURS) == set(get_args(Flavour)), "Flavour out of sync with compactsim.harness.core.evidence.FLAVOURS"


class _Strict(NoBooleanNumbers):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ImageSpec(_Strict):
    """A synthetic image; the same `key` (and seed) always draws the same pixels."""

    kind: Literal["screen", "shape"] = "screen"
    key: str = Field(min_length=1)
    shape: Literal["circle", "square", "triangle", "cross"] | None = None
    width: int = Field(default=32, ge=4, le=512)
    height: int = Field(default=24, ge=4, le=512)
    detail: str = "auto"
    #: The PNG's Pillow mode (pixels drawn in RGB; see `compactsim.agents.media.images.ImageMode`).
    mode: Literal["RGB", "RGBA", "L", "P"] = "RGB"

    @model_validator(mode="after")
    def _recipe_is_drawable(self) -> ImageSpec:
        """The recipe's own checks (a shape image names its shape) at the spec, not when the first image is drawn."""
        self.recipe()
        return self

    def recipe(self) -> ImageRecipe:
        return ImageRecipe(kind=self.kind, key=self.key, width=self.width, height=self.height, shape=self.shape,
                           mode=self.mode)

    def part(self, seed: int) -> dict[str, Any]:
        """The `input_image` content part (Gym's three keys, so its media id is Gym's)."""
        return input_image(png_data_url(render_png(self.recipe(), seed=seed)), detail=self.detail)


def _check_utf8(field: str, text: str | None) -> None:
    """A lone surrogate (``\\ud800`` in a YAML or JSON script) is no text: no UTF-8 request or answer can carry it."""
    if text is None:
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{field}: holds a lone surrogate U+{ord(text[exc.start]):04X} at index {exc.start}, "
                         "which is not text (no request can carry it)") from None


class ToolResult(_Strict):
    """What a tool returns: a text output and, optionally, images shown in a follow-up user message."""

    output: str = "ok"
    images: tuple[ImageSpec, ...] = ()
    caption: str | None = None


class ToolCallSpec(_Strict):
    """A function call the scripted model emits."""

    name: str = Field(min_length=1)
    arguments: dict[str, Any] | str = Field(default_factory=dict)

    def arguments_text(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class TurnScript(_Strict):
    """One model call: what the model says (reasoning, text, tool calls) and what each tool returns."""

    reasoning: str | None = None
    text: str | None = None
    tool_calls: tuple[ToolCallSpec, ...] = ()
    tool_results: tuple[ToolResult, ...] = ()
    finish_reason: Literal["stop", "length"] = "stop"
    logprobs: tuple[float, ...] | None = None

    @model_validator(mode="after")
    def _check(self) -> TurnScript:
        if self.reasoning is None and not self.text and not self.tool_calls:
            raise ValueError("a turn needs at least one of reasoning, text or tool_calls")
        if len(self.tool_results) > len(self.tool_calls):
            raise ValueError(
                f"tool_results has {len(self.tool_results)} entries for {len(self.tool_calls)} tool calls"
            )
        for field, text in self._texts():
            _check_utf8(field, text)
        return self

    def _texts(self) -> list[tuple[str, str | None]]:
        """Every string this turn puts on the wire (the model's answer, the tools' outputs), by field."""
        out: list[tuple[str, str | None]] = [("reasoning", self.reasoning), ("text", self.text)]
        for j, call in enumerate(self.tool_calls):
            out += [(f"tool_calls[{j}].name", call.name), (f"tool_calls[{j}].arguments", call.arguments_text())]
        for j, result in enumerate(self.tool_results):
            out += [(f"tool_results[{j}].output", result.output), (f"tool_results[{j}].caption", result.caption)]
        return out

    def result_for(self, index: int) -> ToolResult:
        """The scripted result of the `index`-th tool call (default: output "ok", no image)."""
        return self.tool_results[index] if index < len(self.tool_results) else ToolResult()

    def server_step(self) -> dict[str, Any]:
        """This turn as the mock model server's `ScriptStep` JSON."""
        step: dict[str, Any] = {
            "reasoning": self.reasoning,
            "text": self.text,
            "tool_calls": [{"name": c.name, "arguments": c.arguments_text()} for c in self.tool_calls],
            "finish_reason": self.finish_reason,
        }
        if self.logprobs is not None:
            step["logprobs"] = list(self.logprobs)
        return step


class RolloutScript(_Strict):
    """The task and every turn of one rollout."""

    task: str = "Open the settings app."
    task_images: tuple[ImageSpec, ...] = ()
    system: str | None = None
    turns: tuple[TurnScript, ...] = Field(min_length=1)

    def agent_input(self, seed: int) -> list[dict[str, Any]]:
        """The initial context: optional system message, then the task (with its images, if any)."""
        items: list[dict[str, Any]] = []
        if self.system is not None:
            items.append({"type": "message", "role": "system", "content": self.system})
        if self.task_images:
            items.append(user_message([*(im.part(seed) for im in self.task_images), input_text(self.task)]))
        else:
            items.append(user_message(self.task))
        return items

    def server_steps(self) -> list[dict[str, Any]]:
        """The model server's script table entry for this rollout."""
        return [t.server_step() for t in self.turns]


class SamplingConfig(_Strict):
    """Request parameters sent with every call (they feed `sampling_contract_id`)."""

    model: str | None = None
    # the ranges the mock model server accepts (OpenAI's): refused here, where a script writes them
    temperature: float = Field(default=1.0, ge=0, le=2, allow_inf_nan=False)
    top_p: float | None = Field(default=None, gt=0, le=1, allow_inf_nan=False)
    max_output_tokens: int | None = Field(default=None, ge=1)
    parallel_tool_calls: bool = True
    tool_choice: str = "auto"

    def body(self) -> dict[str, Any]:
        """The body fields, `None`s dropped (Gym dumps with `exclude_none`), `tools` always present."""
        out = {k: v for k, v in self.model_dump(mode="json").items() if v is not None}
        out["tools"] = []
        return out


class RolloutSpec(_Strict):
    """Everything that determines one scripted rollout and its emitted evidence."""

    rollout_id: str = Field(min_length=1)
    group_id: str | None = None
    task_id: str | None = None
    rollout_index: int | None = Field(default=None, ge=0)
    attempt_index: int | None = Field(default=0, ge=0)
    seed: int = Field(ge=0, lt=2**63)
    #: Seed of the task's images (`script.task_images`); None: `seed`. A GRPO group asks one task, so its rollouts
    #: start from one prompt, pixels included: a scenario gives every rollout of a task the same task seed.
    task_seed: int | None = Field(default=None, ge=0, lt=2**63)
    script: RolloutScript
    context_history: ContextHistoryConfig = Field(default_factory=ContextHistoryConfig)
    flavour: Flavour = "gym-0.7.0-transport"
    max_steps: int | None = Field(default=None, ge=1)
    #: send Gym's `required_prefix_token_ids` on append-compatible views (the compaction agent does;
    #: Gym's plain simple agent, which the "none" flavour models, does not)
    send_required_prefix: bool | None = None
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    model_server: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_MODEL_SERVER))
    #: "chat" (default): POST /v1/chat/completions and convert the answer the way Gym's model server
    #: does, so the evidence is Gym's; "responses": POST /v1/responses to a responses-native server
    endpoint: Literal["responses", "chat"] = "chat"

    @property
    def task_image_seed(self) -> int:
        """The seed the task's images are drawn with (`task_seed`, else the rollout's own)."""
        return self.seed if self.task_seed is None else self.task_seed

    @property
    def sends_required_prefix(self) -> bool:
        if self.send_required_prefix is not None:
            return self.send_required_prefix
        return self.flavour != "none"


#: The task metadata key naming the rollout (Gym forwards a task's metadata on every model call).
ROLLOUT_KEY = "compactsim_rollout_id"


def task_params(spec: RolloutSpec) -> dict[str, Any]:
    """The task's `responses_create_params` without `input`: sampling fields plus the rollout-id metadata.

    Gym's agent sends these on every call and builds `sampling_contract_id` from them (metadata
    included), and its model server echoes them into each `Response`.
    """
    return {**spec.sampling.body(), "metadata": {ROLLOUT_KEY: spec.rollout_id}}


def scripted_turns(
    seed: int,
    *,
    turns: int,
    images_per_observation: int = 1,
    image_pattern: Literal["screens", "shapes", "repeated", "reordered"] = "screens",
    reasoning: bool = True,
    tool_output_chars: int = 24,
    final_finish_reason: Literal["stop", "length"] = "stop",
) -> tuple[TurnScript, ...]:
    """A deterministic GUI-like episode: `turns - 1` tool calls with screenshot observations, then an answer.

    Image patterns: ``screens`` (a new screen per observation), ``shapes`` (same-shape images
    that differ only in colour), ``repeated`` (the observations alternate between two fixed
    same-shape images, so media ids repeat), ``reordered`` (two same-shape images shown in
    swapped order each time; at least two per observation).
    """
    check_seed(seed)
    if turns < 1:
        raise ValueError(f"turns={turns}: expected >= 1")
    check_image_pattern(image_pattern, images_per_observation)
    out: list[TurnScript] = []
    tools = ("screenshot", "click", "type_text", "scroll")
    for t in range(1, turns):
        name = tools[(t - 1) % len(tools)]
        x = derive_int(seed, "script.arg", turn=t) % 100
        output = f"{name} #{t} done at x={x}; " + "status ok " * 8
        images = _observation_images(t, images_per_observation, image_pattern)
        out.append(
            TurnScript(
                reasoning=f"Step {t}: I should {name}." if reasoning else None,
                tool_calls=(ToolCallSpec(name=name, arguments={"x": x}),),
                tool_results=(
                    ToolResult(output=output[:tool_output_chars] if tool_output_chars else output, images=images,
                               caption=f"screen after step {t}" if images else None),
                ),
            )
        )
    out.append(
        TurnScript(
            reasoning="The task is complete." if reasoning else None,
            text="Settings is open.",
            finish_reason=final_finish_reason,
        )
    )
    return tuple(out)


def check_image_pattern(pattern: str, images_per_observation: int) -> None:
    """``reordered`` swaps a pair of images: with one image per observation it would show two anyway."""
    if pattern == "reordered" and 0 < images_per_observation < 2:
        raise ValueError("image_pattern 'reordered' shows two images per observation: set images_per_observation >= 2")


def _observation_images(turn: int, count: int, pattern: str) -> tuple[ImageSpec, ...]:
    if count <= 0:
        return ()
    if pattern == "screens":
        return tuple(ImageSpec(key=f"screen-{turn}-{j}") for j in range(count))
    if pattern == "shapes":
        return tuple(ImageSpec(kind="shape", shape=SHAPES[0], key=f"shape-{turn}-{j}") for j in range(count))
    circle = SHAPES[0]
    if pattern == "repeated":
        return tuple(ImageSpec(kind="shape", shape=circle, key=f"repeated-{(turn + j) % 2}") for j in range(count))
    if pattern == "reordered":
        keys = [f"pair-{j}" for j in range(max(2, count))]
        if turn % 2 == 0:
            keys.reverse()
        return tuple(ImageSpec(kind="shape", shape=circle, key=k) for k in keys)
    raise ValueError(f"image_pattern={pattern!r}: expected screens, shapes, repeated or reordered")


__all__ = [
    "task_params",
    "check_image_pattern",
    "DEFAULT_MODEL_SERVER",
    "ROLLOUT_KEY",
    "Flavour",
    "ImageSpec",
    "RolloutScript",
    "RolloutSpec",
    "SamplingConfig",
    "ToolCallSpec",
    "ToolResult",
    "TurnScript",
    "scripted_turns",
]
