"""Our side of gym-check's live mode: a live script driven through `CompactionSession` and emitted.

`compactsim.harness.gym_check` runs a `LiveScript` through the revision's own `ContextCompactionSession`
and compares the transport payload it gets with `emit_live_script(script)`. To be comparable,
this module feeds our session exactly what Gym's live driver feeds Gym's:

- items shaped as Gym 0.7.0's pydantic models dump them (`gym_output_item`,
  `gym_observation_item`, `gym_input_items`): unknown keys dropped, optional fields spelled
  out as null. The view digest, and through it every prepared-request, request, segment,
  boundary and model-call id, covers those nulls;
- the same prompt rule: a forced `prompt_token_ids`, else the required prefix plus
  `prompt_suffix` on an append-compatible call, else `rewrite_prompt_token_ids`;
- `/run`'s stamping of group_id, task_id, rollout_index and attempt_index on the contract.

The script is read duck-typed (a `LiveScript`, any object with its attributes, or its
`model_dump()` dict), so agents (floor 2) never import `compactsim.harness.gym_check` (floor 4).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from compactsim.agents.compaction.config import ContextHistoryConfig
from compactsim.agents.evidence.gym_transport import emit_transport
from compactsim.agents.rollout.gym_items import gym_input_items, gym_observation_item, gym_output_item
from compactsim.agents.rollout.record import ModelCallLog, RolloutRecord, StopReason, record_from_session
from compactsim.agents.rollout.script import RolloutScript, RolloutSpec, TurnScript
from compactsim.agents.rollout.session import CompactionSession, build_generation_contract
from compactsim.harness.core.errors import ConfigError

#: `LiveScript.model_server`'s default (Gym's compaction model server ref, reference §8).
DEFAULT_LIVE_MODEL_SERVER: dict[str, str] = {"type": "responses_api_models", "name": "policy_model_for_compaction"}
#: Request fields `NeMoGymResponseCreateParamsNonStreaming` fills with a non-null default; they
#: enter the sampling contract because Gym dumps the body with `exclude_none`, not `exclude_unset`.
REQUEST_DEFAULTS: dict[str, Any] = {"parallel_tool_calls": True, "tool_choice": "auto", "tools": []}
_MISSING = object()

# ---------------------------------------------------------------------------------------------
# reading the script


def _get(obj: Any, name: str, default: Any = _MISSING, *, where: str) -> Any:
    if isinstance(obj, Mapping):
        value = obj.get(name, default)
    else:
        value = getattr(obj, name, default)
    if value is _MISSING:
        raise ConfigError("invalid_argument", f"{where}: missing {name!r} (expected a LiveScript or its model_dump())")
    return value


def _int_list(value: Any) -> tuple[int, ...] | None:
    return None if value is None else tuple(int(v) for v in value)


@dataclass(frozen=True, slots=True)
class _Call:
    output: tuple[Mapping[str, Any], ...]
    generation_token_ids: tuple[int, ...]
    generation_log_probs: tuple[float, ...]
    prompt_token_ids: tuple[int, ...] | None
    prompt_suffix: tuple[int, ...]
    rewrite_prompt_token_ids: tuple[int, ...] | None
    observations: tuple[tuple[Mapping[str, Any], ...], ...]
    incomplete_reason: str | None

    def prompt(self, required: tuple[int, ...] | None, *, turn: int, name: str) -> list[int]:
        """Gym's live prompt rule: forced, else required prefix + suffix, else the re-rendered rewrite prompt."""
        if self.prompt_token_ids is not None:
            return list(self.prompt_token_ids)
        if required is not None:
            return [*required, *self.prompt_suffix]
        if self.rewrite_prompt_token_ids is not None:
            return list(self.rewrite_prompt_token_ids)
        raise ConfigError(
            "invalid_argument",
            f"live script {name!r} turn {turn}: the view is not append-compatible here, so the script must give "
            "rewrite_prompt_token_ids (a re-rendered prompt) for this call",
        )


@dataclass(frozen=True, slots=True)
class _Script:
    name: str
    rollout_id: str
    group_id: str | None
    task_id: str | None
    rollout_index: int | None
    attempt_index: int | None
    model: str
    created_at: float
    model_server: Mapping[str, Any]
    request: Mapping[str, Any]
    context_history: Mapping[str, Any]
    calls: tuple[_Call, ...]


def _read_call(obj: Any, where: str) -> _Call:
    output = _get(obj, "output", where=where)
    if not output:
        raise ConfigError("invalid_argument", f"{where}: output must hold at least one item (tokens go on the last)")
    return _Call(
        output=tuple(output),
        generation_token_ids=_int_list(_get(obj, "generation_token_ids", where=where)) or (),
        generation_log_probs=tuple(float(x) for x in _get(obj, "generation_log_probs", where=where)),
        prompt_token_ids=_int_list(_get(obj, "prompt_token_ids", None, where=where)),
        prompt_suffix=_int_list(_get(obj, "prompt_suffix", None, where=where)) or (),
        rewrite_prompt_token_ids=_int_list(_get(obj, "rewrite_prompt_token_ids", None, where=where)),
        observations=tuple(tuple(group) for group in _get(obj, "observations", None, where=where) or ()),
        incomplete_reason=_get(obj, "incomplete_reason", None, where=where),
    )


def _read_script(obj: Any) -> _Script:
    name = str(_get(obj, "name", "<unnamed>", where="live script"))
    where = f"live script {name!r}"
    calls = _get(obj, "calls", where=where)
    if not calls:
        raise ConfigError("invalid_argument", f"{where}: calls must hold at least one model call")
    return _Script(
        name=name,
        rollout_id=str(_get(obj, "rollout_id", where=where)),
        group_id=_get(obj, "group_id", None, where=where),
        task_id=_get(obj, "task_id", None, where=where),
        rollout_index=_get(obj, "rollout_index", None, where=where),
        attempt_index=_get(obj, "attempt_index", None, where=where),
        model=str(_get(obj, "model", "policy", where=where)),
        created_at=float(_get(obj, "created_at", 1.0, where=where)),
        model_server=dict(_get(obj, "model_server", None, where=where) or DEFAULT_LIVE_MODEL_SERVER),
        request=dict(_get(obj, "request", where=where)),
        context_history=dict(_get(obj, "context_history", where=where)),
        calls=tuple(_read_call(c, f"{where} call {i}") for i, c in enumerate(calls, 1)),
    )


# ---------------------------------------------------------------------------------------------
# driving the session


def sampling_config(request: Mapping[str, Any]) -> dict[str, Any]:
    """The request as Gym's `build_generation_contract` sees it: defaults filled, nulls dropped."""
    merged = {**REQUEST_DEFAULTS, **request}
    return {k: v for k, v in merged.items() if v is not None and k not in ("input", "required_prefix_token_ids")}


def _response(script: _Script, turn: int, output: list[dict[str, Any]], incomplete: str | None) -> dict[str, Any]:
    """The model server's answer as Gym's live driver builds it (no status, no usage)."""
    return {
        "id": f"resp_{turn}",
        "created_at": script.created_at,
        "model": script.model,
        "object": "response",
        "status": None,
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }


def _stop_reason(call: _Call, output: Sequence[Mapping[str, Any]]) -> StopReason:
    if call.incomplete_reason:
        return "length"
    return "max_steps" if any(it.get("type") == "function_call" for it in output) else "no_tool_call"


def live_record(script: Any) -> RolloutRecord:
    """Run a live script through our `CompactionSession`; the record our emitters read.

    The record's `spec` carries the identity `/run` stamps; its sampling fields are placeholders
    (the generation contract is built from the script's own request and model server).
    """
    s = _read_script(script)
    history = ContextHistoryConfig.model_validate(s.context_history)
    agent_input = gym_input_items(s.request.get("input", []))
    contract = build_generation_contract(
        sampling_config=sampling_config(s.request), model_server=s.model_server, context_history=history
    )
    session = CompactionSession(history, s.rollout_id, contract, agent_input)
    logs: list[ModelCallLog] = []
    output: list[dict[str, Any]] = []
    for turn, call in enumerate(s.calls, 1):
        prepared = session.prepare_call(turn)
        required = prepared.required_prefix_token_ids
        items = [dict(it) for it in call.output]
        items[-1].update(
            prompt_token_ids=call.prompt(required, turn=turn, name=s.name),
            generation_token_ids=list(call.generation_token_ids),
            generation_log_probs=list(call.generation_log_probs),
        )
        output = [gym_output_item(it) for it in items]
        observed = session.record_response(prepared, output, finish_reason=call.incomplete_reason)
        observations: list[dict[str, Any]] = []
        for group in call.observations:
            shaped = [gym_observation_item(o) for o in group]
            session.append_observation(shaped, turn_id=turn)
            observations.extend(shaped)
        request = {"input": [dict(it) for it in prepared.request_input],
                   "required_prefix_token_ids": None if required is None else list(required)}
        logs.append(ModelCallLog(turn, prepared, request, _response(s, turn, output, call.incomplete_reason),
                                 observed, (), tuple(observations)))
    session.finalize()
    spec = RolloutSpec(
        rollout_id=s.rollout_id, group_id=s.group_id, task_id=s.task_id, rollout_index=s.rollout_index,
        attempt_index=s.attempt_index, seed=0, context_history=history,
        script=RolloutScript(task=f"live script {s.name}", turns=(TurnScript(text="scripted by the live script"),)),
    )
    return record_from_session(spec, session, logs, image_specs={}, stop_reason=_stop_reason(s.calls[-1], output))


def emit_live_script(script: Any) -> dict[str, Any]:
    """gym-check's emitter hook: our transport (schema 3) response for a live script, stamped as `/run` returns it."""
    return emit_transport(live_record(script))


__all__ = [
    "DEFAULT_LIVE_MODEL_SERVER",
    "REQUEST_DEFAULTS",
    "emit_live_script",
    "gym_input_items",
    "gym_observation_item",
    "gym_output_item",
    "live_record",
    "sampling_config",
]
