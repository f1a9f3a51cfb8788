"""Settings of the mock model server: mode, seed, script table, faults, limits (pydantic, extra=forbid).

The answer to a request is a pure function of (these settings, the request body, the policy
version). Scripted answers are looked up by the request's ``metadata``:
``{"compactsim_rollout_id": "<rollout id>", "compactsim_turn": <1-based call index>}``
(strings or ints; Responses metadata values are strings). ``script[rollout_id][turn - 1]`` is
the step for that call. Without metadata, or without a matching step, the server answers a
deterministic default derived from the request digest (see `engine.default_step`).
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StrictInt, field_validator, model_validator

from compactsim.harness.core.chat_template import DRIFT_MODES, AssistantAction, ToolCall, encode_action
from compactsim.harness.core.config_model import NoBooleanNumbers
from compactsim.harness.core.contract import FLOAT32_MAX
from compactsim.harness.core import tokenizer as tok
from compactsim.harness.core.errors import ConfigError

Mode = Literal["scripted", "policy"]

FaultKind = Literal[
    "http_500",  # answer 500 {"detail": "injected fault: http_500"}
    "http_503",  # answer 503 {"detail": "injected fault: http_503"}
    "timeout",  # sleep delay_s (default 30 s) before answering; compactsim's clients time out by half the delay
    "slow",  # sleep delay_s (default 0.25 s), then answer normally
    "truncated_json",  # status 200, content-type JSON, body cut to half its bytes
    "drop_connection",  # send headers and half the body, then close the connection
    "missing_logprobs",  # chat: choice.logprobs = null; responses: generation_log_probs dropped
    "logprob_length_mismatch",  # one logprob fewer than generated tokens
    "surplus_route_rows",  # routed_experts gets 2 extra rows (vLLM allows at most 1 surplus)
    "missing_route_rows",  # routed_experts loses its last 2 rows
    "no_routes",  # routed_experts left out of the answer (vLLM returned no routes for this call)
    "one_surplus_route_row",  # not a fault: the one extra final route row vLLM's packing allows (dropped by trainers)
    "finish_length",  # the stop token is dropped and finish_reason is "length"
]
FAULT_KINDS: tuple[str, ...] = (
    "http_500", "http_503", "timeout", "slow", "truncated_json", "drop_connection", "missing_logprobs",
    "logprob_length_mismatch", "surplus_route_rows", "missing_route_rows", "no_routes", "one_surplus_route_row",
    "finish_length",
)
#: Faults decided at the transport layer (at most one applies: the first matching in list order).
TRANSPORT_FAULTS: frozenset[str] = frozenset({"http_500", "http_503", "timeout", "truncated_json", "drop_connection"})


class _Strict(NoBooleanNumbers):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ScriptToolCall(_Strict):
    """A tool call the scripted model emits; `arguments` dicts are dumped as compact sorted JSON."""

    name: str = Field(min_length=1)
    arguments: str | dict[str, Any] = "{}"

    def arguments_text(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class ScriptStep(_Strict):
    """What the model answers for one call: reasoning, then text, then tool calls.

    Scripted mode emits exactly these strings. Policy mode keeps the structure and the tool calls,
    but samples the reasoning and text bytes from the policy (same byte lengths).
    `logprobs` (scripted mode only) overrides the derived values; its length must equal the number
    of sampled ids (including the stop token when `finish_reason` is "stop").
    """

    reasoning: str | None = None
    text: str | None = None
    tool_calls: tuple[ScriptToolCall, ...] = ()
    logprobs: tuple[float, ...] | None = None
    finish_reason: Literal["stop", "length"] = "stop"

    @model_validator(mode="after")
    def _check(self) -> ScriptStep:
        if self.reasoning is None and not self.text and not self.tool_calls:
            raise ValueError("a step needs at least one of reasoning, text or tool_calls")
        # the answer must be tokens: a text the tokenizer refuses would be a 500 on the call that needs it
        texts = [("reasoning", self.reasoning), ("text", self.text)]
        for j, call in enumerate(self.tool_calls):
            texts += [(f"tool_calls[{j}].name", call.name), (f"tool_calls[{j}].arguments", call.arguments_text())]
        for field, value in texts:
            try:
                tok.encode_text(value or "")
            except ConfigError as exc:
                raise ValueError(f"{field}: {exc.detail}") from None
        ids = self.sampled_ids()
        if self.logprobs is not None:
            n = len(ids)
            if len(self.logprobs) != n:
                raise ValueError(f"logprobs has {len(self.logprobs)} values; the step samples {n} ids")
            if any(not (lp <= 0.0) for lp in self.logprobs):
                raise ValueError("logprobs must be <= 0")
            if any(not lp >= -FLOAT32_MAX for lp in self.logprobs):  # -inf and -1e308: the trainer's float32 cannot hold them
                raise ValueError(f"logprobs must be finite and >= -{FLOAT32_MAX} (float32's range, as Gym evidence must be)")
        return self

    def action(self) -> AssistantAction:
        return AssistantAction(
            reasoning=self.reasoning,
            text=self.text,
            tool_calls=tuple(ToolCall(name=c.name, arguments=c.arguments_text()) for c in self.tool_calls),
        )

    def sampled_ids(self) -> list[int]:
        return encode_action(self.action(), stop=self.finish_reason == "stop")


class FaultSpec(_Strict):
    """One declarative fault switch. It fires on requests matching every given selector, with
    `probability` decided by a draw keyed on (seed, kind, index in the list, request digest)."""

    kind: FaultKind
    rollout_id: str | None = None
    turn: StrictInt | None = Field(default=None, ge=1)
    #: fire only on these 1-based attempts of a call (a transient fault that a retry recovers from
    #: whatever the seed: `attempts=(1,)`); None = every attempt
    attempts: tuple[Annotated[int, Field(ge=1)], ...] | None = Field(default=None, min_length=1)
    endpoint: Literal["any", "chat", "responses"] = "any"
    probability: float = Field(default=1.0, ge=0.0, le=1.0)
    delay_s: float | None = Field(default=None, ge=0.0, le=3600.0)

    def delay(self) -> float:
        if self.delay_s is not None:
            return self.delay_s
        return 30.0 if self.kind == "timeout" else 0.25


#: `PolicySettings.device`: torch device strings the tiny policy may be built on.
DEVICE_PATTERN = re.compile(r"cpu|cuda(:[0-9]{1,3})?")
#: MoE shape caps, the envelope the pipeline reads routes in (`harness.pipeline.ingest.MAX_ROUTE_ELEMENTS`:
#: 128 layers x top-16); experts stay below 128 so a route id fits int8. Larger shapes would make
#: every answer's routes (tokens x layers x top_k) or the policy's weights a memory bomb.
MAX_LAYERS = 128
MAX_EXPERTS = 127
MAX_TOP_K = 16


class PolicySettings(_Strict):
    """How policy mode builds its model: seeded init (default: the server seed), dtype and device."""

    seed: StrictInt | None = Field(default=None, ge=0, lt=2**63)
    dtype: Literal["float32", "float64"] = "float64"
    #: "cpu", "cuda" or "cuda:N" (whether that GPU exists is checked when a server starts: `compactsim serve`)
    device: str = "cpu"
    #: sampled reasoning/text byte lengths when no script step applies
    default_reasoning_bytes: StrictInt = Field(default=8, ge=0, le=4096)
    default_text_bytes: StrictInt = Field(default=16, ge=1, le=4096)
    #: prompt + sampled tokens one generation may forward: the tiny policy's plain attention holds
    #: [heads, S, S] scores (8 * 4 * S**2 bytes in float64: 0.5 GiB at 4096, 8 GiB at 16384), so a
    #: longer request is refused with 422 instead of exhausting the server's memory
    max_sequence_tokens: StrictInt = Field(default=4096, ge=16, le=65536)

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if not DEVICE_PATTERN.fullmatch(v):
            raise ValueError(f"device={v!r}: expected cpu, cuda or cuda:N")
        return v


class Limits(_Strict):
    """Caps that turn into 413 (sizes), 422 (counts) or 408 (time); a refusal names the cap
    (`compactsim.mock_servers.model_server.limits`)."""

    max_body_bytes: StrictInt = Field(default=16 * 1024 * 1024, ge=1024)
    max_image_bytes: StrictInt = Field(default=4 * 1024 * 1024, ge=64)
    max_image_pixels: StrictInt = Field(default=4096 * 4096, ge=1)
    max_images: StrictInt = Field(default=64, ge=0)
    max_prompt_tokens: StrictInt = Field(default=32768, ge=16)
    max_new_tokens: StrictInt = Field(default=4096, ge=1)
    max_weights_bytes: StrictInt = Field(default=256 * 1024 * 1024, ge=1024)
    #: seconds from a request's headers to the end of its body (a 256 MiB `/weights` body takes well
    #: under 1 s on loopback); a client that sends less than it declared gets 408 and a closed
    #: connection instead of holding it forever. The only limit read off a clock.
    body_timeout_s: float = Field(default=10.0, gt=0.0, le=3600.0)
    max_log_entries: StrictInt = Field(default=100_000, ge=0)
    #: JSON nesting levels of a request body (Gym's deepest bodies, tool schemas included, stay under 20)
    max_json_depth: StrictInt = Field(default=64, ge=4, le=1000)
    #: digits of any integer literal in a request (2**64 has 20; longer ones crash int() and digests)
    max_int_digits: StrictInt = Field(default=20, ge=1, le=4000)
    #: characters of a string value in `metadata` (OpenAI's cap)
    max_metadata_value_chars: StrictInt = Field(default=512, ge=1)


class ServerSettings(_Strict):
    """Everything the mock model server's answers depend on besides the request and policy version."""

    mode: Mode = "scripted"
    seed: StrictInt = Field(default=0, ge=0, lt=2**63)
    model_name: str = "compactsim-tiny-moe"
    #: chat-template drift used to render prompts (reproduces legacy retokenization failures)
    drift: str = "none"
    script: dict[str, tuple[ScriptStep, ...]] = Field(default_factory=dict)
    faults: tuple[FaultSpec, ...] = ()
    policy: PolicySettings = PolicySettings()
    limits: Limits = Limits()
    #: MoE shape reported in scripted mode (policy mode uses the policy's config)
    num_layers: StrictInt = Field(default=2, ge=1, le=MAX_LAYERS)
    num_experts: StrictInt = Field(default=4, ge=1, le=MAX_EXPERTS)
    top_k: StrictInt = Field(default=2, ge=1, le=MAX_TOP_K)
    return_routed_experts: bool = True
    #: how answers carry routed experts: vLLM's nested lists, or NeMo-RL's wire envelope
    #: ``nrlre1:int16:SxLxK:<base64 little-endian>`` (nemo-rl-semantics §1.6; golden spec §5 A decodes it)
    routed_experts_format: Literal["lists", "nrlre1"] = "lists"
    #: append every request-log entry as one JSON line here (None: in memory only)
    request_log_path: str | None = None

    @field_validator("request_log_path")
    @classmethod
    def _log_path(cls, v: str | None) -> str | None:
        if v == "":  # Path("") is the current folder: never what was meant
            raise ValueError("an empty path; leave the key out (or null) for an in-memory log only")
        return v

    @field_validator("drift")
    @classmethod
    def _drift(cls, v: str) -> str:
        if v not in DRIFT_MODES:
            raise ValueError(f"drift={v!r}: expected one of {list(DRIFT_MODES)}")
        return v

    @model_validator(mode="after")
    def _check(self) -> ServerSettings:
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k={self.top_k} exceeds num_experts={self.num_experts}")
        return self


__all__ = [
    "DEVICE_PATTERN",
    "FAULT_KINDS",
    "MAX_EXPERTS",
    "MAX_LAYERS",
    "MAX_TOP_K",
    "TRANSPORT_FAULTS",
    "FaultKind",
    "FaultSpec",
    "Limits",
    "Mode",
    "PolicySettings",
    "ScriptStep",
    "ScriptToolCall",
    "ServerSettings",
]
