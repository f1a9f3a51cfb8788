"""Pydantic models of every Gym evidence shape the pipeline accepts (DESIGN §5).

The models tolerate fields Gym may add (``extra="allow"``) but validate, strictly, every field
the pipeline reads. They are the boundary: `compactsim.harness.pipeline.ingest` validates once here and
then works on frozen dataclasses. Field tables: ``reference/gym-contract.md`` §1.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr
from pydantic_core import PydanticCustomError

#: Keys under which Gym producers put the rollout-trace contract.
CONTRACT_KEYS: tuple[str, ...] = ("context_compaction_contract", "rollout_trace_contract")
#: The three fields that make an output item token-bearing; Gym requires all three together.
TOKEN_FIELDS: tuple[str, ...] = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")
#: Key a trainer's collector adds to each `/run` result (next to ``response`` and ``reward``): the
#: policy version it had synced to the generation server when it collected the rollout, from its own
#: bookkeeping (as NeMo-RL labels rows with its sync step). Gym 0.7.0 drops the server's
#: ``policy_version``, so Gym's output items carry none; the ingest fills every call without an
#: item-level version from this label. Not a Gym field.
TRAINER_POLICY_VERSION: str = "trainer_policy_version"

#: Integers beyond this magnitude are not exact in a float64, so they cannot be a logprob or a
#: reward (and `float()` of a much larger one raises OverflowError instead of a typed error).
FLOAT_EXACT_INT: int = 2**53
#: Every other integer the pipeline reads fits int32 (ids, turns, counters, versions).
INT32_LIMIT: int = 2**31
#: Largest finite float32: logprobs are trained in float32, where anything larger becomes +-inf.
FLOAT32_MAX: float = (2 - 2**-23) * 2**127


def _float_not_int(value: Any) -> Any:
    """A float branch that takes no integer: a strict float accepts one, so an integer beyond the integer branch's
    ±2**53 bound (2**53 + 1, -99999999999999999999) would pass as an inexact float; this error's type ends in
    ``_type``, so the integer branch's bound is the error reported."""
    if isinstance(value, int):
        raise PydanticCustomError("float_type", "Input should be a valid number")
    return value


def _float_logprob(value: Any) -> Any:
    """The float branch of `Number`: no integers, and nothing float32 cannot hold.

    Integers are refused as `_float_not_int` says. A finite float64 beyond float32's range (-1e308)
    would turn into -inf when the batch is built. Both checks live here, not in `Field` bounds, so the
    JSON schema `gym-check` compares with Gym's stays unchanged.
    """
    _float_not_int(value)
    if isinstance(value, float) and math.isfinite(value) and abs(value) > FLOAT32_MAX:
        raise PydanticCustomError(
            "float32_range", "Input should be within float32's finite range (|x| <= {bound}), got {value}",
            {"bound": FLOAT32_MAX, "value": value},
        )
    return value


#: vLLM token ids are vocabulary indices: non-negative and within int32.
TokenId = Annotated[StrictInt, Field(ge=0, lt=INT32_LIMIT)]
#: Logprobs must be finite numbers (NaN/inf would poison the loss silently) that stay finite in
#: float32 (-1e308 would become -inf in training) and, written as integers, are exact floats; the
#: sign (<= 0) is a contract rule checked by the planner (`logprob_out_of_range`), not a parse error.
Number = Annotated[StrictFloat, Field(allow_inf_nan=False), BeforeValidator(_float_logprob)] | Annotated[
    StrictInt, Field(ge=-FLOAT_EXACT_INT, le=FLOAT_EXACT_INT)
]


def _not_bool(value: Any) -> Any:
    """`true` is not the integer 1 (a Literal[1] alone would take it: True == 1)."""
    if isinstance(value, bool):
        raise PydanticCustomError("literal_error", "Input should be 1")
    return value


#: Rewards: finite and within +-2^53, so group means and variances stay finite in float64.
Reward = Annotated[StrictFloat, Field(allow_inf_nan=False, ge=-FLOAT_EXACT_INT, le=FLOAT_EXACT_INT),
                   BeforeValidator(_float_not_int)] | Annotated[StrictInt, Field(ge=-FLOAT_EXACT_INT, le=FLOAT_EXACT_INT)]
RouteId = Annotated[StrictInt, Field(ge=-1, lt=INT32_LIMIT)]
RoutedExperts = StrictStr | list[list[list[RouteId]]]
#: Counters and versions: non-negative int32.
Count = Annotated[StrictInt, Field(ge=0, lt=INT32_LIMIT)]
#: Agent steps are 1-based.
TurnId = Annotated[StrictInt, Field(ge=1, lt=INT32_LIMIT)]
#: A step reference on a boundary event; any int32 (a wrong one is `orphan_compaction_event`, not a parse error).
StepRef = Annotated[StrictInt, Field(gt=-INT32_LIMIT, lt=INT32_LIMIT)]
#: An image side in pixels.
Dimension = Annotated[StrictInt, Field(ge=1, lt=INT32_LIMIT)]


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
    policy_version: Count | None = None


class OutputItem(_Tolerant):
    """A Responses-API output item; only `type` is required of items without tokens."""

    type: StrictStr


class GenerationContract(_Tolerant):
    """`GenerationContract` (schema 1): ids of the components that produced the tokens."""

    schema_version: Annotated[Literal[1], BeforeValidator(_not_bool)] = 1
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

    schema_version: Count | None = None
    mode: StrictStr | None = None
    rollout_id: StrictStr
    group_id: StrictStr | None = None
    task_id: StrictStr | None = None
    rollout_index: Count | None = None
    attempt_index: Count | None = None
    generation_contract: GenerationContract | None = None


class CallRecord(_Tolerant):
    """Fields shared by `ModelCallMetadata` (transport) and `ObservedCompletion` (full)."""

    rollout_id: StrictStr
    turn_id: TurnId
    context_epoch: Count = 0
    segment_index: Count = 0
    expected_append_compatible: StrictBool
    compaction_event_id: StrictStr | None = None
    finish_reason: StrictStr | None = None
    media_ids: list[StrictStr] = Field(default_factory=list)
    policy_version: Count | None = None


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
    trigger_after_step: StepRef
    applies_to_step: StepRef
    reason: StrictStr = "history_policy_rewrite"
    retained_media_count: Count | None = None
    removed_media_count: Count | None = None


class MediaAssetModel(_Tolerant):
    """One `media_assets` value: the registered image part and its digest."""

    media_id: StrictStr
    content_digest: StrictStr | None = None
    source_part: dict[str, Any]
    #: Gym's `[width, height]`, checked against the decoded pixels when the image is materialised.
    original_dimensions: Annotated[list[Dimension], Field(min_length=2, max_length=2)] | None = None
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
    reward: Reward | None = None
    instance_config: InstanceConfig | None = None
    #: The trainer's generation-version label (`TRAINER_POLICY_VERSION`): a non-negative int32 like
    #: every version, so a string, a negative or a 20-digit value is a typed refusal here rather than
    #: ignored or an overflow in the materializer's int64 tensors.
    trainer_policy_version: Count | None = None


def with_trainer_policy_version(result: dict[str, Any], version: int) -> dict[str, Any]:
    """Label one `/run` result (in place, and returned) with the trainer's generation version."""
    if not isinstance(version, int) or isinstance(version, bool) or not 0 <= version < INT32_LIMIT:
        raise ValueError(f"a generation policy version is a non-negative int32, got {version!r}")
    result[TRAINER_POLICY_VERSION] = version
    return result


__all__ = [
    "CONTRACT_KEYS",
    "FLOAT32_MAX",
    "FLOAT_EXACT_INT",
    "INT32_LIMIT",
    "TOKEN_FIELDS",
    "TRAINER_POLICY_VERSION",
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
    "with_trainer_policy_version",
]
