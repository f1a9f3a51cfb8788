"""Compaction configuration: Gym's `context_history` models (same names, defaults, errors) plus ours.

`identity` and `recency` and the two schedules mean exactly what they mean in Gym's
`simple_agent_with_compaction` (gym-contract.md §3). `summary`, `tool_output_truncation` and
`think_strip` are compactsim policies registered the way Gym registers custom policies.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from compactsim.harness.core.config_model import NoBooleanNumbers

#: Every policy type compactsim's agents can run.
POLICY_TYPES: tuple[str, ...] = ("identity", "recency", "summary", "think_strip", "tool_output_truncation")


class _Config(NoBooleanNumbers):
    model_config = ConfigDict(extra="forbid")


def _non_default_settings(config: BaseModel) -> set[str]:
    """Knobs set to a non-default value.

    Gym rejects any explicitly set knob of a disabled kind; we reject only non-default values, so
    that a dumped config (which spells out every default) validates again.
    """
    fields = type(config).model_fields
    return {n for n in config.model_fields_set - {"enabled"} if getattr(config, n) != fields[n].default}


class ImageRecencyConfig(_Config):
    """Keep the last K image observation groups (plus protected and pending ones)."""

    enabled: bool = False
    protect_initial_context: bool = True
    keep_last_groups: int = Field(default=3, ge=0)
    omission_marker: str | None = "[Earlier image omitted]"

    @model_validator(mode="after")
    def _disabled_has_no_settings(self) -> ImageRecencyConfig:
        configured = _non_default_settings(self)
        if not self.enabled and configured:
            raise ValueError(f"Image recency settings require images.enabled=true: configured={sorted(configured)}")
        return self


class ReasoningRecencyConfig(_Config):
    """Keep the last K reasoning blocks (one block per model call), optionally the first too."""

    enabled: bool = False
    keep_first_block: bool = False
    keep_last_blocks: int = Field(default=3, ge=0)

    @model_validator(mode="after")
    def _disabled_has_no_settings(self) -> ReasoningRecencyConfig:
        configured = _non_default_settings(self)
        if not self.enabled and configured:
            raise ValueError(
                f"Reasoning recency settings require reasoning.enabled=true: configured={sorted(configured)}"
            )
        return self


class RecencyHistoryPolicyConfig(_Config):
    """Gym's `recency` policy (version 2): per-kind recency windows."""

    images: ImageRecencyConfig = Field(default_factory=ImageRecencyConfig)
    reasoning: ReasoningRecencyConfig = Field(default_factory=ReasoningRecencyConfig)

    @model_validator(mode="after")
    def _one_kind_enabled(self) -> RecencyHistoryPolicyConfig:
        if not self.images.enabled and not self.reasoning.enabled:
            raise ValueError("The recency policy requires images.enabled or reasoning.enabled")
        return self


class SummaryPolicyConfig(_Config):
    """Replace older turns with one scripted summary message.

    At decision turn d, let s be the largest entry of `at_turns` with s <= d. Every
    non-initial part of turns 1 .. s-1-keep_last_turns becomes one summary message whose text
    is `text` with ``{first_turn}`` / ``{last_turn}`` filled in. Before the first trigger the view
    is the full history, so each trigger is exactly one rewrite boundary.
    """

    at_turns: tuple[int, ...] = Field(default=(3,), min_length=1)
    keep_last_turns: int = Field(default=1, ge=0)
    text: str = Field(default="[Summary of turns {first_turn}-{last_turn}]", min_length=1)

    @field_validator("text")
    @classmethod
    def _placeholders(cls, v: str) -> str:
        """Only ``{first_turn}`` and ``{last_turn}`` are filled in: any other field or a lone brace is refused here,
        not when the first summary is written mid-rollout."""
        try:
            v.format(first_turn=1, last_turn=1)
        except (KeyError, IndexError, ValueError, AttributeError, TypeError) as exc:
            raise ValueError(f"text {v[:60]!r} must be a format string with only {{first_turn}} and {{last_turn}} "
                             f"(write {{{{ and }}}} for braces): {type(exc).__name__}: {exc}") from None
        return v

    @model_validator(mode="after")
    def _sorted_turns(self) -> SummaryPolicyConfig:
        if any(t < 2 for t in self.at_turns) or list(self.at_turns) != sorted(set(self.at_turns)):
            raise ValueError(f"summary at_turns must be strictly increasing turns >= 2: at_turns={list(self.at_turns)}")
        return self


class ToolOutputTruncationConfig(_Config):
    """Truncate older tool outputs to `max_chars` characters followed by `marker`.

    The last `keep_last` tool outputs stay whole, and so does any output that conditions the
    call being prepared (pending), even with `keep_last=0`.
    """

    max_chars: int = Field(default=16, ge=0)
    keep_last: int = Field(default=1, ge=0)
    marker: str = "...[truncated]"


class ThinkStripConfig(_Config):
    """Drop reasoning of every completed turn except the last `keep_last_turns` (chat-template style).

    With ``keep_last_turns=0`` the reasoning of the call just answered is dropped from the very next
    view. Gym's append rule compares only the previous *view's* descriptor, which never held that
    reasoning, so it declares the view append-compatible while the tokens are not: Gym's agent then
    fails its required-prefix check. That is faithful, and a useful adversarial case, but not a
    sensible default.
    """

    keep_last_turns: int = Field(default=1, ge=0)


_POLICY_CONFIG_MODELS: dict[str, type[BaseModel]] = {
    "recency": RecencyHistoryPolicyConfig,
    "summary": SummaryPolicyConfig,
    "tool_output_truncation": ToolOutputTruncationConfig,
    "think_strip": ThinkStripConfig,
}

PolicyConfig = RecencyHistoryPolicyConfig | SummaryPolicyConfig | ToolOutputTruncationConfig | ThinkStripConfig


class HistoryPolicyConfig(_Config):
    """Select a policy by name; its config is coerced to the policy's own model."""

    type: str = Field(default="identity", min_length=1)
    config: PolicyConfig | dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _coerce_config(cls, data: Any) -> Any:
        if isinstance(data, dict):
            model = _POLICY_CONFIG_MODELS.get(str(data.get("type", "identity")))
            raw = data.get("config", {})
            if model is not None and not isinstance(raw, model):
                data = {**data, "config": model.model_validate(raw if raw is not None else {})}
        return data

    @model_validator(mode="after")
    def _known_type(self) -> HistoryPolicyConfig:
        if self.type not in POLICY_TYPES:
            raise ValueError(f"Unknown history policy {self.type!r}; available policies: {sorted(POLICY_TYPES)}")
        return self


class CompactionScheduleConfig(_Config):
    """When a selected base may be rewritten: every call (rolling) or every K actions (chunked)."""

    type: Literal["rolling_recency", "turn_chunked_recency"] = "rolling_recency"
    actions_per_chunk: int = Field(default=1, ge=1)

    @model_validator(mode="after")
    def _rolling_is_one(self) -> CompactionScheduleConfig:
        if self.type == "rolling_recency" and self.actions_per_chunk != 1:
            raise ValueError("rolling_recency requires actions_per_chunk=1")
        return self


class ContextGuardConfig(_Config):
    """Gym's admission guards; kept for the `compaction_policy_id` digest, not enforced here."""

    max_total_tokens: int | None = Field(default=None, ge=1)
    reserved_generation_tokens: int = Field(default=0, ge=0)
    max_active_images: int | None = Field(default=None, ge=0)
    max_vision_tokens: int | None = Field(default=None, ge=0)
    projected_vision_tokens_per_image: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _vision_needs_projection(self) -> ContextGuardConfig:
        if self.max_vision_tokens is not None and self.projected_vision_tokens_per_image is None:
            raise ValueError("max_vision_tokens requires projected_vision_tokens_per_image")
        if any(v is not None for v in (self.max_total_tokens, self.max_active_images, self.max_vision_tokens)):
            raise ValueError("context guards are not supported by compactsim's scripted agents")
        return self


class ContextHistoryConfig(_Config):
    """Gym's `context_history:` block: policy + schedule (+ guards, which must stay off)."""

    #: Gym's switch; a disabled block is no compaction at all, which a scenario writes as ``identity`` (or no
    #: `compaction`), so only True is accepted here.
    enabled: Literal[True] = True
    policy: HistoryPolicyConfig = Field(default_factory=HistoryPolicyConfig)
    schedule: CompactionScheduleConfig = Field(default_factory=CompactionScheduleConfig)
    guards: ContextGuardConfig = Field(default_factory=ContextGuardConfig)


__all__ = [
    "POLICY_TYPES",
    "CompactionScheduleConfig",
    "ContextGuardConfig",
    "ContextHistoryConfig",
    "HistoryPolicyConfig",
    "ImageRecencyConfig",
    "PolicyConfig",
    "ReasoningRecencyConfig",
    "RecencyHistoryPolicyConfig",
    "SummaryPolicyConfig",
    "ThinkStripConfig",
    "ToolOutputTruncationConfig",
]
