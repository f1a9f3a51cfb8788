"""Request models of the mock model server (vLLM chat completions, Gym Responses, tokenize, weights).

Known fields are validated (a bad one gets 422 naming it); unknown vendor fields are accepted
and ignored, as vLLM and Gym send many (`skip_special_tokens`, `chat_template_kwargs`, ...),
but they still enter the request digest. Messages and items are validated by the chat template,
whose errors also name the offending path. Responses are built as plain dicts in `serialize`
so their bytes are stable; their shapes are documented there.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)


#: bounds shared by the generation bodies: finite, OpenAI's ranges; token counts fit an int32
Temperature = Annotated[float, Field(ge=0.0, le=2.0, allow_inf_nan=False)]
TopP = Annotated[float, Field(gt=0.0, le=1.0, allow_inf_nan=False)]
TokenCount = Annotated[int, Field(ge=1, le=2**31 - 1)]
TokenId = Annotated[int, Field(ge=0, le=2**31 - 1)]


class ChatCompletionRequest(_Lenient):
    """vLLM `/v1/chat/completions` body with the extensions NeMo-Gym sends."""

    model: str | None = None
    messages: list[dict[str, Any]] = Field(min_length=1)
    max_tokens: TokenCount | None = None
    max_completion_tokens: TokenCount | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    return_tokens_as_token_ids: bool = False
    return_token_ids: bool = False
    required_prefix_token_ids: list[TokenId] | None = None
    metadata: dict[str, Any] | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    n: int = Field(default=1, ge=1, le=1)
    stream: bool = Field(default=False, description="streaming is not supported; must be false")
    tools: list[dict[str, Any]] | None = None


class ResponsesRequest(_Lenient):
    """Gym-model-server-style `/v1/responses` body (`VLLMContextCompactionResponseCreateParams`)."""

    model: str | None = None
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    max_output_tokens: TokenCount | None = None
    required_prefix_token_ids: list[TokenId] | None = None
    metadata: dict[str, Any] | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    stream: bool = Field(default=False, description="streaming is not supported; must be false")
    tools: list[dict[str, Any]] | None = None


class TokenizeRequest(_Lenient):
    """`/tokenize`: chat `messages`, Responses `input` (+ `instructions`), or a plain `prompt` string."""

    model: str | None = None
    messages: list[dict[str, Any]] | None = None
    input: str | list[dict[str, Any]] | None = None
    instructions: str | None = None
    prompt: str | None = None
    add_generation_prompt: bool = True


class SeedWeightsRequest(BaseModel):
    """JSON form of `POST /weights`: re-initialise the policy from a seed."""

    model_config = ConfigDict(extra="forbid")
    seed: StrictInt = Field(ge=0, lt=2**63)  # strict: true or "1" is not a seed


__all__ = ["ChatCompletionRequest", "ResponsesRequest", "SeedWeightsRequest", "TokenizeRequest"]
