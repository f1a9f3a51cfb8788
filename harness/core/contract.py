"""Pydantic models of every Gym evidence shape the pipeline accepts (DESIGN §5).

The models tolerate fields Gym may add (``extra="allow"``) but validate, strictly, every field
the pipeline reads. They are the boundary: `harness.pipeline.ingest` validates once here and
then works on frozen dataclasses. Field tables: ``reference/gym-contract.md`` §1.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr

#: Keys under which Gym producers put the rollout-trace contract.
CONTRACT_KEYS: tuple[str, ...] = ("context_compaction_contract", "rollout_trace_contract")
#: The three fields that make an output item token-bearing; Gym requires all three together.
TOKEN_FIELDS: tuple[str, ...] = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")

#: vLLM token ids are vocabulary indices: non-negative and within int32.
TokenId = Annotated[StrictInt, Field(ge=0, lt=2**31)]
#: Logprobs must be finite numbers (NaN/inf would poison the loss silently).
Number = Annotated[StrictFloat, Field(allow_inf_nan=False)] | StrictInt
RouteId = Annotated[StrictInt, Field(ge=-1, lt=2**31)]
RoutedExperts = StrictStr | list[list[list[RouteId]]]


class _Tolerant(BaseModel):
    """Unknown keys are kept (Gym adds fields); every declared field is validated strictly."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)


class TokenFields(_Tolerant):
    """`TokenIDLogProbMixin`: the exact token evidence of one model call, on its last output item."""

    prompt_token_ids: list[TokenId]
    generation_token_ids: list[TokenId]
    generation_log_probs: list[Number]
    routed_experts: RoutedExperts | None = None
    #: compactsim extension: the policy version that generated this call (mock server reports it).
    policy_version: StrictInt | None = None


class OutputItem(_Tolerant):
    """A Responses-API output item; only `type` is required of items without tokens."""

    type: StrictStr


class GenerationContract(_Tolerant):
    """`GenerationContract` (schema 1): ids of the components that produced the tokens."""

    schema_version: Literal[1] = 1
    model_contract_id: StrictStr
    tokenizer_contract_id: StrictStr
    template_contract_id: StrictStr
    sampling_contract_id: StrictStr
    processor_contract_id: StrictStr
    compaction_policy_id: StrictStr
    generation_contract_id: StrictStr
    loss_normalization: Literal["global_action_token_mean"] = "global_action_token_mean"
    training_eligible: StrictBool = False
    incomplete_reasons: list[StrictStr] = Field(default_factory=list)


class RolloutContract(_Tolerant):
    """The contract object under `context_compaction_contract` (schema 2/3) or `rollout_trace_contract`."""

    schema_version: StrictInt | None = None
    mode: StrictStr | None = None
    rollout_id: StrictStr
    group_id: StrictStr | None = None
    task_id: StrictStr | None = None
    rollout_index: StrictInt | None = Field(default=None, ge=0)
    attempt_index: StrictInt | None = Field(default=None, ge=0)
    generation_contract: GenerationContract | None = None


class CallRecord(_Tolerant):
    """Fields shared by `ModelCallMetadata` (transport) and `ObservedCompletion` (full)."""

    rollout_id: StrictStr
    turn_id: StrictInt = Field(ge=1)
    context_epoch: StrictInt = Field(default=0, ge=0)
    segment_index: StrictInt = Field(default=0, ge=0)
    expected_append_compatible: StrictBool
    compaction_event_id: StrictStr | None = None
    finish_reason: StrictStr | None = None
    media_ids: list[StrictStr] = Field(default_factory=list)
    policy_version: StrictInt | None = None


class ModelCallMetadata(CallRecord):
    """Transport (schema 3 / PR #2870) per-call record, bound to its output item by the digest."""

    generation_evidence_digest: StrictStr


class ObservedCompletion(CallRecord):
    """Full envelope (schema 2) per-call record carrying the token arrays itself."""

    prompt_token_ids: list[TokenId]
    sampled_token_ids: list[TokenId]
    sampled_logprobs: list[Number]


class BoundaryEventModel(_Tolerant):
    """`RewriteBoundaryEvent`, reduced to the fields the planner reads."""

    event_id: StrictStr
    trigger_after_step: StrictInt
    applies_to_step: StrictInt
    reason: StrictStr = "history_policy_rewrite"
    retained_media_count: StrictInt | None = None
    removed_media_count: StrictInt | None = None


class MediaAssetModel(_Tolerant):
    """One `media_assets` value: the registered image part and its digest."""

    media_id: StrictStr
    content_digest: StrictStr | None = None
    source_part: dict[str, Any]
    original_dimensions: list[StrictInt] | None = None
    color_mode: StrictStr | None = None
    source_format: StrictStr | None = None


class GymResponse(_Tolerant):
    """A Gym agent response: the openai `Response` envelope plus compaction evidence."""

    output: list[OutputItem]
    media_assets: dict[str, MediaAssetModel] = Field(default_factory=dict)
    model_call_metadata: list[ModelCallMetadata] | None = None
    completion_evidence: list[ObservedCompletion] | None = None
    boundary_events: list[BoundaryEventModel] = Field(default_factory=list)
    context_compaction_contract: RolloutContract | None = None
    rollout_trace_contract: RolloutContract | None = None


class InstanceConfig(_Tolerant):
    mask_sample: StrictBool = False


class RunResult(_Tolerant):
    """Gym's `/run` verify result wrapping the response (the way a trainer receives it)."""

    response: GymResponse
    reward: Number | None = None
    instance_config: InstanceConfig | None = None


__all__ = [
    "CONTRACT_KEYS",
    "TOKEN_FIELDS",
    "BoundaryEventModel",
    "CallRecord",
    "GenerationContract",
    "GymResponse",
    "InstanceConfig",
    "MediaAssetModel",
    "ModelCallMetadata",
    "ObservedCompletion",
    "OutputItem",
    "RolloutContract",
    "RunResult",
    "TokenFields",
]
