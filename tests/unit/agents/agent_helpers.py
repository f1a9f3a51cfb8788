"""Shared helpers for the agent tests (plain functions; `conftest.py` wraps them as fixtures)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from compactsim.agents.compaction.config import ContextHistoryConfig
from compactsim.agents.items import function_call_output, input_text, user_message
from compactsim.agents.rollout.record import ModelCallLog, RolloutRecord, record_from_session
from compactsim.agents.rollout.script import RolloutScript, RolloutSpec, SamplingConfig, TurnScript
from compactsim.agents.rollout.session import CompactionSession, build_generation_contract
from compactsim.harness.core import chat_template as ct

#: The §8 example's policy and task item (gym-contract.md §8).
REFERENCE_HISTORY = {"enabled": True, "policy": {"type": "recency", "config": {"reasoning": {"enabled": True, "keep_last_blocks": 1}}}}
REFERENCE_TASK = {"content": "Open the settings app.", "role": "user", "type": "message", "phase": None}


def reference_record(example: dict[str, Any]) -> RolloutRecord:
    """The §8 rollout replayed item for item through `CompactionSession` (no HTTP)."""
    out = example["output"]
    image = example["media_assets"]["media-e5214ee50da1954c70348ac5"]["source_part"]
    spec = RolloutSpec(
        rollout_id="rollout-demo-0", group_id="group-demo", task_id="task-demo", rollout_index=0, attempt_index=0,
        seed=0, script=RolloutScript(task="Open the settings app.", turns=(TurnScript(text="unused"),)),
        context_history=ContextHistoryConfig.model_validate(REFERENCE_HISTORY), sampling=SamplingConfig(temperature=1.0),
    )
    contract = build_generation_contract(
        sampling_config=spec.sampling.body(), model_server=spec.model_server, context_history=spec.context_history
    )
    session = CompactionSession(spec.context_history, spec.rollout_id, contract, [dict(REFERENCE_TASK)])
    observation = {**out[2], "content": [dict(image), *out[2]["content"]]}
    plan = [(out[0:2], [observation]), (out[3:5], [out[5]]), (out[6:7], [])]
    calls: list[ModelCallLog] = []
    envelope = {k: example[k] for k in ("id", "created_at", "model", "object", "parallel_tool_calls", "tool_choice", "tools")}
    for turn, (output, observations) in enumerate(plan, start=1):
        call = session.prepare_call(turn)
        observed = session.record_response(call, output, finish_reason=None)
        if observations:
            session.append_observation(observations, turn_id=turn)
        response = {**envelope, "status": "completed", "incomplete_details": None, "output": list(output)}
        calls.append(ModelCallLog(turn, call, {"input": list(call.request_input)}, response, observed, (),
                                  tuple(observations)))
    session.finalize()
    return record_from_session(spec, session, calls, image_specs={}, stop_reason="no_tool_call")


def model_answer(items: Sequence[Mapping[str, Any]], step: TurnScript, *, turn: int, logprob: float = -0.5) -> list[dict[str, Any]]:
    """What a perfect scripted model returns for `items`: parsed output with token fields on the last item."""
    prompt = ct.render_prompt(list(items))
    action = ct.AssistantAction(
        reasoning=step.reasoning,
        text=step.text,
        tool_calls=tuple(ct.ToolCall(name=c.name, arguments=c.arguments_text()) for c in step.tool_calls),
    )
    sampled = ct.encode_action(action, stop=True)
    items_out = [dict(it) for it in ct.parse_completion(sampled, item_id=f"t{turn}").items]
    items_out[-1].update(
        prompt_token_ids=list(prompt.token_ids),
        generation_token_ids=sampled,
        generation_log_probs=[logprob] * len(sampled),
    )
    return items_out


def drive_session(history: ContextHistoryConfig, script: RolloutScript, *, seed: int = 0,
                  rollout_id: str = "rollout-test") -> CompactionSession:
    """Run a script through a session with `model_answer` as the model (the agent loop, minus HTTP)."""
    contract = build_generation_contract(sampling_config={"temperature": 1.0, "tools": []},
                                         model_server={"name": "m"}, context_history=history)
    session = CompactionSession(history, rollout_id, contract, script.agent_input(seed))
    for turn, step in enumerate(script.turns, start=1):
        call = session.prepare_call(turn)
        output = model_answer(call.request_input, step, turn=turn)
        session.record_response(call, output, finish_reason=None)
        observations: list[dict[str, Any]] = []
        for j, fc in enumerate(it for it in output if it["type"] == "function_call"):
            result = step.result_for(j)
            observations.append(function_call_output(fc["call_id"], result.output))
            if result.images:
                parts = [im.part(seed) for im in result.images]
                if result.caption:
                    parts.append(input_text(result.caption))
                observations.append(user_message(parts))
        if observations:
            session.append_observation(observations, turn_id=turn)
    session.finalize()
    return session


def make_spec(preset: str = "recency-images-k2", *, turns: int = 6, flavour: str = "gym-0.7.0-transport",
              seed: int = 0, rollout_id: str = "rollout-0", rollout_index: int = 0, **script_kwargs: Any) -> RolloutSpec:
    """A scripted GUI rollout spec with a named compaction preset."""
    from compactsim.agents.compaction.presets import policy_preset
    from compactsim.agents.rollout.script import scripted_turns

    return RolloutSpec(
        rollout_id=rollout_id, group_id="group-0", task_id="task-0", rollout_index=rollout_index, seed=seed,
        script=RolloutScript(turns=scripted_turns(seed, turns=turns, **script_kwargs)),
        context_history=policy_preset(preset), flavour=flavour,  # type: ignore[arg-type]
    )
