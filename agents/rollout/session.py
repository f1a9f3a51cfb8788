"""One rollout's compaction state and exact evidence, as Gym's `ContextCompactionSession` keeps it.

The agent loop calls `prepare_call(turn)` (view, required prefix, prepared ids, lineage delta),
sends the view, then `record_response(...)` (captures the `ObservedCompletion`, acknowledges
the view, appends the output) and `append_observation(...)` for tool results. Everything the
emitters need is read back from the session afterwards.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from compactsim.agents.compaction.config import ContextHistoryConfig
from compactsim.agents.compaction.controller import PreparedView, RewriteBoundary, build_controller
from compactsim.agents.compaction.history import SemanticHistory
from compactsim.agents.items import TOKEN_FIELDS, is_token_bearing
from compactsim.agents.compaction.lineage import LineageDelta, PolicyDecision, UnitLineageRecord, lineage_delta
from compactsim.agents.compaction.policies import build_policy
from compactsim.agents.rollout.response_checks import output_item_problem
from compactsim.harness.core.digests import canonical_digest, stable_id

#: Gym's reasons why its generation contract is never training-eligible.
INCOMPLETE_REASONS: tuple[str, ...] = (
    "exact_tokenizer_identity_not_reported_by_generation_server",
    "exact_chat_template_identity_not_reported_by_generation_server",
    "exact_multimodal_processor_fingerprint_not_reported_by_generation_server",
)
_UNAVAILABLE = "server-authoritative-unavailable"


class EvidenceViolation(RuntimeError):
    """A model response breaks a generation-time rule Gym enforces (the rollout cannot continue)."""

    def __init__(self, rule: str, detail: str) -> None:
        self.rule = rule
        super().__init__(detail)


@dataclass(frozen=True, slots=True)
class GenerationContract:
    """Gym's `GenerationContract` (schema 1): component ids and their composition id."""

    model_contract_id: str
    tokenizer_contract_id: str
    template_contract_id: str
    sampling_contract_id: str
    processor_contract_id: str
    compaction_policy_id: str
    generation_contract_id: str

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": 1,
            "model_contract_id": self.model_contract_id,
            "tokenizer_contract_id": self.tokenizer_contract_id,
            "template_contract_id": self.template_contract_id,
            "sampling_contract_id": self.sampling_contract_id,
            "processor_contract_id": self.processor_contract_id,
            "compaction_policy_id": self.compaction_policy_id,
            "generation_contract_id": self.generation_contract_id,
            "loss_normalization": "global_action_token_mean",
            "training_eligible": False,
            "incomplete_reasons": list(INCOMPLETE_REASONS),
        }


def build_generation_contract(
    *, sampling_config: Mapping[str, Any], model_server: Mapping[str, Any], context_history: ContextHistoryConfig
) -> GenerationContract:
    """Gym's `build_generation_contract`; `sampling_config` is the request body minus input/prefix."""
    sampling = {k: v for k, v in sampling_config.items() if k not in ("input", "required_prefix_token_ids")}
    components = {
        "model_contract_id": stable_id("model-contract", dict(model_server)),
        "tokenizer_contract_id": stable_id("tokenizer-contract", _UNAVAILABLE),
        "template_contract_id": stable_id("template-contract", _UNAVAILABLE),
        "sampling_contract_id": stable_id("sampling-contract", sampling),
        "processor_contract_id": stable_id("processor-contract", _UNAVAILABLE),
        "compaction_policy_id": stable_id("compaction-policy", context_history.model_dump(mode="json")),
    }
    return GenerationContract(
        **components, generation_contract_id=stable_id("generation-contract", canonical_digest(components))
    )


@dataclass(frozen=True, slots=True)
class PreparedCall:
    """One finalized request view with its ids (Gym's `PreparedContextCompactionCall`)."""

    turn_id: int
    request_input: tuple[Mapping[str, Any], ...]
    prepared: PreparedView
    required_prefix_token_ids: tuple[int, ...] | None
    prepared_request_id: str
    segment_id: str
    lineage_delta: LineageDelta

    @property
    def media_ids(self) -> tuple[str, ...]:
        return self.prepared.view.media_ids

    @property
    def boundary(self) -> RewriteBoundary | None:
        return self.prepared.boundary


@dataclass(frozen=True, slots=True)
class ObservedCompletion:
    """Gym's `ObservedCompletion`: the exact evidence of one model call and every id derived from it."""

    rollout_id: str
    completion_id: str
    action_id: str
    turn_id: int
    prepared_request_id: str
    request_id: str
    context_epoch: int
    segment_index: int
    segment_id: str
    expected_append_compatible: bool
    compaction_event_id: str | None
    prompt_token_ids: tuple[int, ...]
    sampled_token_ids: tuple[int, ...]
    sampled_logprobs: tuple[float, ...]
    finish_reason: str | None
    media_ids: tuple[str, ...]
    policy_decision: Mapping[str, Any]
    generation_contract_id: str
    model_call_id: str
    eligible: bool = True

    @property
    def generation_evidence_digest(self) -> str:
        return canonical_digest(
            {
                "prompt_token_ids": self.prompt_token_ids,
                "sampled_token_ids": self.sampled_token_ids,
                "sampled_logprobs": self.sampled_logprobs,
            }
        )

    def policy_output_spans(self) -> list[dict[str, Any]]:
        n = len(self.sampled_token_ids)
        return [
            {
                "policy_output_span_id": stable_id("policy-output-span", self.model_call_id, self.action_id, n),
                "model_call_id": self.model_call_id,
                "action_ids": [self.action_id],
                "start": 0,
                "end": n,
                "eligible": self.eligible,
                "old_logprobs_alignment": "sampled_tokens",
            }
        ]

    def media_occurrences(self) -> list[dict[str, Any]]:
        seen: Counter[str] = Counter()
        out: list[dict[str, Any]] = []
        for media_id in self.media_ids:
            out.append(
                {
                    "media_id": media_id,
                    "occurrence_ordinal": seen[media_id],
                    "model_call_id": self.model_call_id,
                    "placeholder_span_or_position": None,
                    "processed_dimensions": None,
                    "model_specific_sidecars": {},
                }
            )
            seen[media_id] += 1
        return out

    def _head(self) -> dict[str, Any]:
        return {
            "rollout_id": self.rollout_id,
            "completion_id": self.completion_id,
            "action_id": self.action_id,
            "turn_id": self.turn_id,
            "prepared_request_id": self.prepared_request_id,
            "request_id": self.request_id,
            "context_epoch": self.context_epoch,
            "segment_index": self.segment_index,
            "segment_id": self.segment_id,
            "expected_append_compatible": self.expected_append_compatible,
            "compaction_event_id": self.compaction_event_id,
        }

    def _tail(self) -> dict[str, Any]:
        return {
            "finish_reason": self.finish_reason,
            "media_ids": list(self.media_ids),
            "policy_decision": dict(self.policy_decision),
            "generation_contract_id": self.generation_contract_id,
            "policy_output_spans": self.policy_output_spans(),
            "media_occurrences": self.media_occurrences(),
            "processor_fingerprint": None,
            "eligible": self.eligible,
            "evidence_source": "generation_response",
        }

    def to_json(self) -> dict[str, Any]:
        """The full-envelope (schema 2) `completion_evidence` record, Gym's field order."""
        arrays = {
            "prompt_token_ids": list(self.prompt_token_ids),
            "sampled_token_ids": list(self.sampled_token_ids),
            "sampled_logprobs": list(self.sampled_logprobs),
        }
        return {**self._head(), **arrays, **self._tail()}

    def metadata_json(self) -> dict[str, Any]:
        """The transport `model_call_metadata` record: arrays replaced by their digest."""
        return {**self._head(), **self._tail(), "generation_evidence_digest": self.generation_evidence_digest}


def capture_observed_completion(
    output_items: Sequence[Mapping[str, Any]],
    *,
    rollout_id: str,
    call: PreparedCall,
    generation_contract_id: str,
    finish_reason: str | None,
    check_prefix: bool = True,
) -> ObservedCompletion:
    """Extract the one token-bearing item, check the required prefix, derive every id."""
    evidence = [item for item in output_items if is_token_bearing(item)]
    if len(evidence) != 1:
        raise EvidenceViolation(
            "missing_token_evidence",
            f"Expected exactly one generation evidence item for a model call, found {len(evidence)}",
        )
    item = evidence[0]
    problem = output_item_problem(item, "the generation evidence item")
    if problem is not None:  # the agent's own check already refused this answer; callers that skip it meet it here
        raise EvidenceViolation("token_evidence_type", problem)
    prompt = tuple(int(t) for t in item[TOKEN_FIELDS[0]])
    sampled = tuple(int(t) for t in item[TOKEN_FIELDS[1]])
    logprobs = tuple(float(x) for x in item[TOKEN_FIELDS[2]])
    if len(sampled) != len(logprobs):
        raise EvidenceViolation(
            "token_logprob_length",
            f"sampled token/logprob length mismatch: tokens={len(sampled)} logprobs={len(logprobs)}",
        )
    required = (call.required_prefix_token_ids or ()) if check_prefix else ()
    if required and prompt[: len(required)] != required:
        raise EvidenceViolation(
            "required_prefix",
            "Generation-observed prompt does not contain the required exact prefix: "
            f"required_count={len(required)} prompt_count={len(prompt)}",
        )
    turn = call.turn_id
    identity = canonical_digest(
        {"rollout_id": rollout_id, "turn_id": turn, "prompt_token_ids": prompt, "sampled_token_ids": sampled}
    )
    completion_id = f"completion-{turn:06d}-{identity[:12]}"
    media_ids = call.media_ids
    request_id = stable_id("request", call.prepared_request_id, prompt, media_ids)
    prepared = call.prepared
    return ObservedCompletion(
        rollout_id=rollout_id,
        completion_id=completion_id,
        action_id=f"action-{turn:06d}",
        turn_id=turn,
        prepared_request_id=call.prepared_request_id,
        request_id=request_id,
        context_epoch=prepared.context_epoch,
        segment_index=prepared.segment_index,
        segment_id=call.segment_id,
        expected_append_compatible=prepared.append_compatible,
        compaction_event_id=prepared.boundary.event_id if prepared.boundary is not None else None,
        prompt_token_ids=prompt,
        sampled_token_ids=sampled,
        sampled_logprobs=logprobs,
        finish_reason=finish_reason,
        media_ids=media_ids,
        policy_decision=prepared.view.decision.evidence_json(),
        generation_contract_id=generation_contract_id,
        model_call_id=stable_id("model-call", request_id, completion_id),
    )


@dataclass
class CompactionSession:
    """Owns one rollout's semantic history, schedule controller and exact evidence."""

    config: ContextHistoryConfig
    rollout_id: str
    generation_contract: GenerationContract
    initial_context: Sequence[Mapping[str, Any]]
    seed_observations: Sequence[Mapping[str, Any]] = ()
    completion_evidence: list[ObservedCompletion] = field(default_factory=list)
    lineage_deltas: list[LineageDelta] = field(default_factory=list)
    final_policy_decision: PolicyDecision | None = None

    def __post_init__(self) -> None:
        self.history = SemanticHistory(self.rollout_id)
        if self.initial_context:
            self.history.append_items(
                list(self.initial_context),
                turn_id=0,
                is_initial_context=True,
                conditions_action_turn=None if self.seed_observations else 1,
            )
        if self.seed_observations:
            self.history.append_items(list(self.seed_observations), turn_id=0, conditions_action_turn=1)
        self.controller = build_controller(self.history, build_policy(self.config.policy), self.config.schedule)
        self._output: list[Mapping[str, Any]] = []
        self._lineage_state: dict[str, UnitLineageRecord] = {}
        self._parent_transformation: str | None = None
        self._segment_ids: dict[int, str] = {}

    @property
    def output_items(self) -> tuple[Mapping[str, Any], ...]:
        """The complete logical output: every call's items and every observation, in order."""
        return tuple(self._output)

    @property
    def boundary_events(self) -> tuple[RewriteBoundary, ...]:
        return self.controller.boundary_events

    def prepare_call(self, turn_id: int) -> PreparedCall:
        """Plan the view for `turn_id`, its required prefix and ids; record the lineage delta."""
        prepared = self.controller.prepare(applies_to_step=turn_id)
        self.final_policy_decision = prepared.view.decision
        required = None
        if prepared.append_compatible and self.completion_evidence:
            previous = self.completion_evidence[-1]
            required = (*previous.prompt_token_ids, *previous.sampled_token_ids)
        contract_id = self.generation_contract.generation_contract_id
        prepared_request_id = stable_id("prepared-request", self.rollout_id, turn_id, prepared.view_digest, contract_id)
        segment_id = self._segment_ids.setdefault(
            prepared.segment_index,
            stable_id("segment", self.rollout_id, prepared.context_epoch, prepared.segment_index, prepared.view_digest),
        )
        delta, self._lineage_state = lineage_delta(
            prepared.view.decision.lineage, previous=self._lineage_state, parent_transformation_id=self._parent_transformation
        )
        self.lineage_deltas.append(delta)
        self._parent_transformation = delta.transformation_id
        return PreparedCall(
            turn_id=turn_id,
            request_input=prepared.view.items,
            prepared=prepared,
            required_prefix_token_ids=required,
            prepared_request_id=prepared_request_id,
            segment_id=segment_id,
            lineage_delta=delta,
        )

    def record_response(
        self,
        call: PreparedCall,
        output_items: Sequence[Mapping[str, Any]],
        *,
        finish_reason: str | None,
        check_prefix: bool = True,
    ) -> ObservedCompletion:
        """Capture the call's evidence, acknowledge its view, append its output to the history.

        `check_prefix=False` is Gym's plain agent, which sends no required prefix and checks none.
        """
        observed = capture_observed_completion(
            output_items,
            rollout_id=self.rollout_id,
            call=call,
            generation_contract_id=self.generation_contract.generation_contract_id,
            finish_reason=finish_reason,
            check_prefix=check_prefix,
        )
        self.completion_evidence.append(observed)
        self.controller.acknowledge(call.prepared, action_id=observed.action_id, completion_id=observed.completion_id)
        self.history.append_items(list(output_items), turn_id=call.turn_id)
        self._output.extend(output_items)
        return observed

    def append_observation(self, items: Sequence[Mapping[str, Any]], *, turn_id: int) -> None:
        """Tool/environment observations produced after call `turn_id`; they condition the next call."""
        self.history.append_items(list(items), turn_id=turn_id, conditions_action_turn=turn_id + 1)
        self._output.extend(items)

    def finalize(self) -> None:
        """End of rollout: close a partly filled chunk."""
        self.controller.finalize()


__all__ = [
    "INCOMPLETE_REASONS",
    "CompactionSession",
    "EvidenceViolation",
    "GenerationContract",
    "ObservedCompletion",
    "PreparedCall",
    "build_generation_contract",
    "capture_observed_completion",
]
