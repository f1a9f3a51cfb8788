"""The scripted agent: a Gym-style multi-turn loop over HTTP with compaction, tools and bounded retries.

For each step: prepare the compacted view, convert it the way Gym's model server does and POST it
to ``/v1/chat/completions`` (or, for a responses-native server, to ``/v1/responses``) (with
`required_prefix_token_ids` when the view extends the last one), record the exact evidence,
answer every function call from the script, and stop after a turn without a tool call, at
`max_steps`, or when generation hit its token budget (`finish_reason` length). Transient
faults (5xx/429, timeouts, broken connections, unparsable bodies) are retried up to the
budget; then, or on any other fault, the rollout ends with a classified `RolloutFailure`.
The client must carry a read timeout, so a rollout can never hang. Like a Gym task, every call
carries the same metadata (the rollout id) and a retry repeats the identical body: the server
derives turn and attempt itself (`send_turn_hints` adds its optional hints).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from compactsim.agents.items import function_call_output, function_calls, input_text, user_message
from compactsim.agents.media.arena import media_id_for
from compactsim.agents.rollout.chat import chat_body, completion_to_response
from compactsim.agents.rollout.gym_items import gym_input_items, gym_observation_item, gym_output_item
from compactsim.agents.rollout.gym_response import IdMint, derived_id
from compactsim.agents.rollout.response_checks import chat_completion_problem, lone_surrogate_problem, responses_problem
from compactsim.agents.rollout.record import (
    TRANSIENT_FAILURES,
    Attempt,
    FailureKind,
    ModelCallLog,
    RolloutFailure,
    RolloutRecord,
    StopReason,
    record_from_session,
)
from compactsim.agents.rollout.script import RolloutSpec, task_params
from compactsim.agents.rollout.session import CompactionSession, EvidenceViolation, build_generation_contract


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounded retries of transient faults (the client's own timeout bounds every single request)."""

    max_attempts: int = 3
    backoff_s: float = 0.0
    max_backoff_s: float = 2.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts={self.max_attempts}: expected >= 1")

    def delay(self, attempt: int) -> float:
        """Sleep before attempt `attempt` (2, 3, ...): exponential from `backoff_s`, capped."""
        return min(self.backoff_s * (2 ** (attempt - 2)), self.max_backoff_s) if self.backoff_s else 0.0


class CallFailed(Exception):
    """A request that did not yield a usable answer within the retry budget."""

    def __init__(self, kind: FailureKind, attempts: tuple[Attempt, ...], detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.attempts = attempts
        self.detail = detail


def _classify_status(status: int, text: str) -> FailureKind:
    """5xx/429 are transient; a 4xx naming the required prefix is the server's own prefix check."""
    if status == 429 or status >= 500:
        return "server_unavailable"
    if "required_prefix_token_ids" in text:
        return "evidence_violation"
    return "rejected_request"


def post_json(
    client: httpx.Client,
    path: str,
    body: Mapping[str, Any],
    *,
    retry: RetryPolicy,
    validate: Callable[[Any], str | None] = lambda _: None,
    body_for_attempt: Callable[[int], Mapping[str, Any]] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[dict[str, Any], tuple[Attempt, ...], Mapping[str, Any]]:
    """POST JSON with bounded retries; returns (parsed body, attempts, body sent) or raises `CallFailed`.

    `validate` returns a reason when a 200 body is not the expected shape (retried as
    `malformed_response`, as is a body whose text no UTF-8 request could echo:
    `response_checks.lone_surrogate_problem`). `body_for_attempt(n)` may vary the body per attempt.
    """
    attempts: list[Attempt] = []
    kind: FailureKind = "connection"
    detail = ""
    for n in range(1, retry.max_attempts + 1):
        if n > 1 and retry.delay(n):
            sleep(retry.delay(n))
        payload = body_for_attempt(n) if body_for_attempt is not None else body
        try:
            resp = client.post(path, json=payload)
        except httpx.TimeoutException as exc:
            kind, detail = "timeout", f"{type(exc).__name__}: {exc}"
        except httpx.TransportError as exc:
            kind, detail = "connection", f"{type(exc).__name__}: {exc}"
        else:
            if resp.status_code != 200:
                kind = _classify_status(resp.status_code, resp.text)
                detail = f"HTTP {resp.status_code}: {resp.text[:300]}"
                if kind not in TRANSIENT_FAILURES:
                    attempts.append(Attempt(kind, detail))
                    raise CallFailed(kind, tuple(attempts), detail)
            else:
                try:
                    data = resp.json()
                except ValueError as exc:
                    kind, detail = "malformed_response", f"body is not JSON ({exc}); {len(resp.content)} bytes"
                else:
                    problem = lone_surrogate_problem(resp.content, data) or validate(data)
                    if problem is None:
                        attempts.append(Attempt("ok"))
                        return data, tuple(attempts), payload
                    kind, detail = "malformed_response", problem
        attempts.append(Attempt(kind, detail))
    raise CallFailed(kind, tuple(attempts), f"{detail} (gave up after {retry.max_attempts} attempt(s))")


@dataclass
class ScriptedAgent:
    """Runs scripted rollouts against a model server through one reused `httpx.Client`."""

    client: httpx.Client
    retry: RetryPolicy = RetryPolicy()
    responses_path: str = "/v1/responses"
    chat_path: str = "/v1/chat/completions"
    sleep: Callable[[float], None] = time.sleep
    #: safety cap when the spec sets no `max_steps` (a model that never stops calling tools)
    step_cap: int = 1000
    #: also send the server's optional ``compactsim_turn``/``compactsim_attempt`` hints. Off by
    #: default: like a Gym task's metadata, the agent sends only its rollout id, the same on every
    #: call, and retries with the identical body; the server derives turn and attempt (DESIGN §6b).
    send_turn_hints: bool = False
    #: where the ``rs_``/``msg_``/``resp_`` ids of the chat route come from (Gym mints them with uuid4)
    mint: IdMint = derived_id

    def __post_init__(self) -> None:
        timeout = getattr(self.client, "timeout", None)
        if isinstance(timeout, httpx.Timeout) and timeout.read is None:
            raise ValueError("the client has no read timeout; a stalled server would hang the rollout")

    def run(self, spec: RolloutSpec) -> RolloutRecord:
        """Run one rollout to its end (a stop or a classified failure) and return its record."""
        agent_input = gym_input_items(spec.script.agent_input(spec.task_image_seed))
        image_specs: dict[str, Mapping[str, Any]] = {}
        for im in spec.script.task_images:
            image_specs[media_id_for(im.part(spec.task_image_seed))] = im.model_dump(mode="json")
        contract = build_generation_contract(
            sampling_config=task_params(spec), model_server=spec.model_server, context_history=spec.context_history
        )
        session = CompactionSession(spec.context_history, spec.rollout_id, contract, agent_input)
        calls: list[ModelCallLog] = []
        stop: StopReason | None = None
        failure: RolloutFailure | None = None
        turn = 0
        while True:
            turn += 1
            call = session.prepare_call(turn)
            body = self._body(spec, call.request_input, call.required_prefix_token_ids, turn)
            chat = spec.endpoint == "chat"
            try:
                response, attempts, sent = post_json(
                    self.client,
                    self.chat_path if chat else self.responses_path,
                    body,
                    retry=self.retry,
                    validate=chat_completion_problem if chat else responses_problem,
                    body_for_attempt=lambda n, b=body: _attempt_body(b, n, chat=chat, hint=self.send_turn_hints),
                    sleep=self.sleep,
                )
                if chat:
                    response = completion_to_response(response, body, mint=self.mint)
            except CallFailed as exc:
                failure = RolloutFailure(exc.kind, turn, len(exc.attempts), exc.detail, exc.attempts)
                break
            # exactly Gym's items: Gym drops the server's top-level `policy_version` (the call log keeps it)
            output = [gym_output_item(it) for it in response.get("output", [])]
            incomplete = response.get("incomplete_details") or None
            finish = incomplete.get("reason") if isinstance(incomplete, dict) else None
            try:
                observed = session.record_response(
                    call, output, finish_reason=finish, check_prefix=spec.sends_required_prefix
                )
            except EvidenceViolation as exc:
                failure = RolloutFailure("evidence_violation", turn, len(attempts), f"{exc.rule}: {exc}", attempts)
                break
            fcs = function_calls(output)
            observations: list[dict[str, Any]] = []
            shown: list[tuple[str, Mapping[str, Any]]] = []
            if finish is None and fcs:
                observations, shown = self._tool_observations(spec, turn, fcs)
                observations = [gym_observation_item(o) for o in observations]
                session.append_observation(observations, turn_id=turn)
                for media_id, im in shown:
                    image_specs.setdefault(media_id, im)
            calls.append(
                ModelCallLog(turn, call, sent, {**response, "output": output}, observed, attempts,
                             tuple(observations), tuple(shown))
            )
            if finish is not None:
                stop = "length"
            elif not fcs:
                stop = "no_tool_call"
            elif turn >= (spec.max_steps or self.step_cap):
                stop = "max_steps"
            if stop is not None:
                break
        session.finalize()
        return record_from_session(spec, session, calls, image_specs=image_specs, stop_reason=stop, failure=failure)

    def _body(
        self, spec: RolloutSpec, items: Any, prefix: tuple[int, ...] | None, turn: int
    ) -> dict[str, Any]:
        body: dict[str, Any] = {**task_params(spec), "input": [dict(it) for it in items]}
        if spec.sends_required_prefix:
            body["required_prefix_token_ids"] = list(prefix) if prefix is not None else None
        if self.send_turn_hints:
            body["metadata"] = {**body["metadata"], "compactsim_turn": str(turn)}
        return body

    def _tool_observations(
        self, spec: RolloutSpec, turn: int, fcs: list[Mapping[str, Any]]
    ) -> tuple[list[dict[str, Any]], list[tuple[str, Mapping[str, Any]]]]:
        """Answer each function call from the script: a text output, then a user message with its images."""
        script = spec.script.turns[turn - 1] if turn <= len(spec.script.turns) else None
        items: list[dict[str, Any]] = []
        shown: list[tuple[str, Mapping[str, Any]]] = []
        for j, fc in enumerate(fcs):
            result = script.result_for(j) if script is not None else None
            items.append(function_call_output(str(fc.get("call_id", "")), result.output if result else "ok"))
            if result is not None and result.images:
                parts = []
                for im in result.images:
                    part = im.part(spec.seed)
                    shown.append((media_id_for(part), im.model_dump(mode="json")))
                    parts.append(part)
                if result.caption is not None:
                    parts.append(input_text(result.caption))
                items.append(user_message(parts))
        return items, shown


def _attempt_body(body: Mapping[str, Any], attempt: int, *, chat: bool, hint: bool = False) -> Mapping[str, Any]:
    """The body of attempt `attempt`: identical to the first (as Gym retries), or with the attempt hint."""
    if hint and attempt > 1:
        body = {**body, "metadata": {**body.get("metadata", {}), "compactsim_attempt": str(attempt)}}
    return chat_body(body) if chat else body


__all__ = ["CallFailed", "RetryPolicy", "ScriptedAgent", "post_json"]
