"""Any client drives the scripted server (DESIGN §6b): turn and attempt come from the requests themselves.

The clients here are plain: OpenAI chat-completions bodies shaped as Gym's model server sends
them, or Responses bodies, with no ``compactsim_*`` metadata (or Gym's constant task metadata).
They compact their history mid-rollout the way compactsim's policies do (a summary replacing
every earlier turn, dropped images, stripped reasoning), retry a failed call with the identical
body, and interleave rollouts; the server must still play each rollout's script in order.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from compactsim.harness.core import chat_template as ct
from compactsim.mock_servers.model_server import FaultSpec, ScriptStep, ScriptToolCall, ServerSettings
from compactsim.mock_servers.model_server.engine import CallHints, CallTracker, call_digest, opens_episode, task_rollout_key
from compactsim.mock_servers.model_server.faults import fault_draw
from tests.unit.mock_servers.model_server.server_builders import IMAGE_URL, SyncASGIClient, client_for, meta

SYSTEM = {"role": "system", "content": "You operate a desktop."}
TASK_A = {"role": "user", "content": [{"type": "text", "text": "Open the settings app."},
                                      {"type": "image_url", "image_url": {"url": IMAGE_URL, "detail": "auto"}}]}
TASK_B = {"role": "user", "content": "Open the mail app."}
KEY_A = task_rollout_key({"messages": [SYSTEM, TASK_A]})
KEY_B = task_rollout_key({"messages": [SYSTEM, TASK_B]})
FINAL_A = "Settings is open."
FINAL_B = "Mail is open."


def _tool_step(reasoning: str, name: str, x: int) -> ScriptStep:
    return ScriptStep(reasoning=reasoning, tool_calls=(ScriptToolCall(name=name, arguments={"x": x}),))


SCRIPT = {
    KEY_A: (_tool_step("look first", "screenshot", 1), _tool_step("click the gear", "click", 2),
            _tool_step("scroll down", "scroll", 3), ScriptStep(reasoning="done", text=FINAL_A)),
    KEY_B: (_tool_step("find mail", "screenshot", 7), _tool_step("click mail", "click", 8),
            _tool_step("wait", "scroll", 9), ScriptStep(text=FINAL_B)),
    "r1": (_tool_step("hinted one", "click", 11), _tool_step("hinted two", "click", 12),
           ScriptStep(text="hinted final")),
}


def _settings(*faults: FaultSpec) -> ServerSettings:
    return ServerSettings(seed=11, script=SCRIPT, faults=faults)


# ---------------------------------------------------------------------------------------------- plain clients


class ChatRollout:
    """A user's own agent over chat completions: Gym's request fields, no compactsim hints.

    At `compact_at` it replaces every earlier turn with one summary message (the hardest case:
    no earlier assistant message or tool result survives) and drops the task image.
    """

    def __init__(self, task: dict, *, metadata: dict | None = None, compact_at: int | None = 3) -> None:
        self.messages: list[dict[str, Any]] = [SYSTEM, task]
        self.metadata = metadata
        self.compact_at = compact_at
        self.turn = 0
        self.answers: list[dict[str, Any]] = []
        self.done = False

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"model": "policy", "messages": self.messages, "logprobs": True, "top_logprobs": 0,
                                "return_tokens_as_token_ids": True, "return_token_ids": True, "tools": [],
                                "temperature": 1.0}
        if self.metadata is not None:
            body["metadata"] = self.metadata
        return body

    def prepare(self) -> dict[str, Any]:
        self.turn += 1
        if self.turn == self.compact_at:
            task = dict(self.messages[1])
            if isinstance(task["content"], list):
                task["content"] = [p for p in task["content"] if p.get("type") != "image_url"]
            summary = {"role": "user", "content": f"Summary of turns 1-{self.turn - 1}: progress made."}
            self.messages = [SYSTEM, task, summary]
        return self.body()

    def absorb(self, data: dict[str, Any]) -> None:
        choice = data["choices"][0]
        msg = choice["message"]
        self.answers.append(msg)
        self.messages = [*self.messages, {"role": "assistant", "content": msg["content"] or "",
                                          "reasoning_content": msg["reasoning_content"], "tool_calls": msg["tool_calls"]}]
        if not msg["tool_calls"]:
            self.done = True
        for call in msg["tool_calls"]:
            self.messages.append({"role": "tool", "tool_call_id": call["id"], "content": f"{call['function']['name']} ok"})

    def step(self, client: SyncASGIClient, *, tries: int = 3) -> list[int]:
        """One turn with Gym's retry rule (identical body on a 5xx); returns the statuses seen."""
        body = self.prepare()
        statuses = []
        for _ in range(tries):
            r = client.post("/v1/chat/completions", json=body)
            statuses.append(r.status_code)
            if r.status_code == 200:
                self.absorb(r.json())
                break
        return statuses


class ResponsesRollout(ChatRollout):
    """The same agent over `/v1/responses` items; compaction strips old reasoning and images instead."""

    def __init__(self, task: dict, **kwargs: Any) -> None:
        super().__init__(task, **kwargs)
        parts = task["content"]
        if isinstance(parts, list):
            parts = [{"type": "input_text", "text": p["text"]} if p["type"] == "text"
                     else {"type": "input_image", "image_url": p["image_url"]["url"], "detail": "auto"} for p in parts]
        self.messages = [{"type": "message", **SYSTEM}, {"type": "message", "role": "user", "content": parts}]

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"model": "policy", "input": self.messages, "tools": [], "temperature": 1.0}
        if self.metadata is not None:
            body["metadata"] = self.metadata
        return body

    def prepare(self) -> dict[str, Any]:
        self.turn += 1
        if self.turn == self.compact_at:
            self.messages = [it for it in self.messages if it.get("type") != "reasoning"]
            self.messages = [{**it, "content": [p for p in it["content"] if p.get("type") != "input_image"]}
                             if isinstance(it.get("content"), list) else it for it in self.messages]
        return self.body()

    def absorb(self, data: dict[str, Any]) -> None:
        out = [{k: v for k, v in it.items() if k not in ("prompt_token_ids", "generation_token_ids",
                                                         "generation_log_probs", "routed_experts")}
               for it in data["output"]]
        self.answers.append({"output": out})
        self.messages = [*self.messages, *out]
        calls = [it for it in out if it["type"] == "function_call"]
        self.done = not calls
        for call in calls:
            self.messages.append({"type": "function_call_output", "call_id": call["call_id"], "output": f"{call['name']} ok"})

    def step(self, client: SyncASGIClient, *, tries: int = 3) -> list[int]:
        body = self.prepare()
        statuses = []
        for _ in range(tries):
            r = client.post("/v1/responses", json=body)
            statuses.append(r.status_code)
            if r.status_code == 200:
                self.absorb(r.json())
                break
        return statuses


def _run(client: SyncASGIClient, rollout: ChatRollout, *, max_turns: int = 8) -> list[list[int]]:
    statuses = []
    while not rollout.done and rollout.turn < max_turns:
        statuses.append(rollout.step(client))
    return statuses


def _tool_names(rollout: ChatRollout) -> list[str]:
    return [c["function"]["name"] for a in rollout.answers for c in a["tool_calls"]]


def _log(client: SyncASGIClient) -> list[dict[str, Any]]:
    return client.get("/request_log").json()["entries"]


# ---------------------------------------------------------------------------------------------- scripts advance


def test_plain_chat_client_with_a_summary_compaction_reaches_the_final_answer():
    rollout = ChatRollout(TASK_A)
    with client_for(_settings()) as c:
        statuses = _run(c, rollout)
        log = _log(c)
    assert statuses == [[200], [200], [200], [200]]
    assert _tool_names(rollout) == ["screenshot", "click", "scroll"]
    assert rollout.answers[-1]["content"] == FINAL_A
    assert rollout.answers[2]["reasoning_content"] == "scroll down"  # turn 3 was sent right after the summary
    assert [(e["rollout_id"], e["turn"], e["attempt"]) for e in log] == [(KEY_A, t, 1) for t in (1, 2, 3, 4)]
    assert {e["key_source"] for e in log} == {"rollout=task turn=derived attempt=derived"}


def test_plain_responses_client_with_dropped_reasoning_and_images_reaches_the_final_answer():
    rollout = ResponsesRollout(TASK_A)
    with client_for(_settings()) as c:
        statuses = _run(c, rollout)
        log = _log(c)
    assert statuses == [[200], [200], [200], [200]]
    names = [it["name"] for a in rollout.answers for it in a["output"] if it["type"] == "function_call"]
    assert names == ["screenshot", "click", "scroll"]
    assert rollout.answers[-1]["output"][-1]["content"][0]["text"] == FINAL_A
    assert [e["turn"] for e in log] == [1, 2, 3, 4]


def test_gym_constant_task_metadata_names_the_rollout_and_turns_are_derived():
    """Gym forwards the task's metadata unchanged on every call: a rollout id there, no turn."""
    rollout = ChatRollout({"role": "user", "content": "anything"}, metadata={"compactsim_rollout_id": "r1", "task": "t"})
    with client_for(_settings()) as c:
        _run(c, rollout)
        log = _log(c)
    assert _tool_names(rollout) == ["click", "click"]
    assert rollout.answers[-1]["content"] == "hinted final"
    assert [(e["rollout_id"], e["turn"], e["key_source"]) for e in log] == [
        ("r1", t, "rollout=metadata turn=derived attempt=derived") for t in (1, 2, 3)]


def test_scripted_logprobs_and_routes_are_keyed_by_the_derived_turn():
    """The evidence of a call is the same whether its turn was derived or given as a hint."""
    derived = ChatRollout(TASK_A, compact_at=None)
    with client_for(_settings()) as c:
        bodies = []
        while not derived.done:
            bodies.append(derived.prepare())
            r = c.post("/v1/chat/completions", json=bodies[-1])
            derived.absorb(r.json())
            bodies[-1] = (bodies[-1], r.content)
    with client_for(_settings()) as c:
        for turn, (body, content) in enumerate(bodies, start=1):
            hinted = c.post("/v1/chat/completions", json={**body, "metadata": {"compactsim_rollout_id": KEY_A,
                                                                               "compactsim_turn": str(turn)}})
            a, b = json.loads(content), hinted.json()
            assert a["choices"][0]["logprobs"] == b["choices"][0]["logprobs"]
            assert a["choices"][0]["message"]["routed_experts"] == b["choices"][0]["message"]["routed_experts"]
            assert a["choices"][0]["token_ids"] == b["choices"][0]["token_ids"]


# ---------------------------------------------------------------------------------------------- retries


def test_a_503_on_the_first_attempt_fires_once_and_the_identical_retry_succeeds():
    fault = FaultSpec(kind="http_503", rollout_id=KEY_A, turn=2, attempts=(1,))
    rollout = ChatRollout(TASK_A)
    clean = ChatRollout(TASK_A)
    with client_for(_settings(fault)) as c:
        statuses = _run(c, rollout)
        log = _log(c)
    with client_for(_settings()) as c:
        _run(c, clean)
    assert statuses == [[200], [503, 200], [200], [200]]
    assert rollout.answers == clean.answers
    assert [(e["turn"], e["attempt"], e["status"], e["faults"]) for e in log] == [
        (1, 1, 200, []), (2, 1, 503, ["http_503"]), (2, 2, 200, []), (3, 1, 200, []), (4, 1, 200, [])]
    assert log[1]["request_digest"] == log[2]["request_digest"]  # the retry is byte-identical


def test_a_503_on_every_attempt_exhausts_gyms_three_tries():
    fault = FaultSpec(kind="http_503", rollout_id=KEY_A, turn=2)
    rollout = ChatRollout(TASK_A)
    with client_for(_settings(fault)) as c:
        rollout.step(c)
        assert rollout.step(c) == [503, 503, 503]
        log = _log(c)
    assert [e["attempt"] for e in log] == [1, 1, 2, 3]


def test_probability_draws_are_keyed_on_the_attempt_so_a_retry_can_succeed():
    fault = FaultSpec(kind="http_503", turn=1, probability=0.5)
    bodies = [ChatRollout({"role": "user", "content": f"task {i}"}).prepare() for i in range(12)]
    statuses = []
    with client_for(_settings(fault)) as c:
        for body in bodies:
            statuses.append([c.post("/v1/chat/completions", json=body).status_code for _ in range(4)])
    want = [[503 if fault_draw(11, kind="http_503", index=0, request_digest=call_digest(b), attempt=a) < 0.5 else 200
             for a in (1, 2, 3, 4)] for b in bodies]
    assert statuses == want
    assert any(s[0] == 503 and 200 in s[1:] for s in statuses)  # some call failed, then a retry succeeded
    assert any(s[0] == 200 for s in statuses)


# ---------------------------------------------------------------------------------------------- arrival order


def _interleaved(order: list[str], make: Callable[[dict], ChatRollout]) -> dict[str, ChatRollout]:
    rollouts = {"a": make(TASK_A), "b": make(TASK_B)}
    with client_for(_settings()) as c:
        for name in order:
            rollouts[name].step(c)
    return rollouts


@pytest.mark.parametrize("make", [ChatRollout, ResponsesRollout])
def test_two_rollouts_interleaved_in_either_order_get_identical_answers(make):
    sequential = _interleaved(list("aaaabbbb"), make)
    a_first = _interleaved(list("abababab"), make)
    b_first = _interleaved(list("babababa"), make)
    for name in ("a", "b"):
        assert sequential[name].answers == a_first[name].answers == b_first[name].answers
        assert sequential[name].done
    assert sequential["a"].answers != sequential["b"].answers


# ---------------------------------------------------------------------------------------------- metadata override


def test_metadata_hints_override_the_derived_turn_and_attempt():
    fault = FaultSpec(kind="http_503", rollout_id="r1", turn=2, attempts=(1,))
    first = ChatRollout({"role": "user", "content": "x"}).prepare()
    with client_for(_settings(fault)) as c:
        turn3 = c.post("/v1/chat/completions", json={**first, "metadata": meta("r1", 3)})
        turn2 = c.post("/v1/chat/completions", json={**first, "metadata": meta("r1", 2)})
        turn2_attempt2 = c.post("/v1/chat/completions",
                                json={**first, "metadata": {**meta("r1", 2), "compactsim_attempt": "2"}})
        log = _log(c)
    assert turn3.json()["choices"][0]["message"]["content"] == "hinted final"
    assert turn2.status_code == 503
    assert turn2_attempt2.status_code == 200
    assert turn2_attempt2.json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == '{"x":12}'
    assert [(e["turn"], e["attempt"], e["key_source"]) for e in log] == [
        (3, 1, "rollout=metadata turn=metadata attempt=derived"),
        (2, 1, "rollout=metadata turn=metadata attempt=derived"),  # attempts count per (body, turn)
        (2, 2, "rollout=metadata turn=metadata attempt=metadata"),
    ]


def test_a_rerun_by_another_client_starts_a_new_episode_of_the_rollout():
    """The opening body (system + task only) restarts the turn count; identical bodies stay retries."""
    with client_for(_settings()) as c:
        chat = ChatRollout(TASK_A, metadata={"compactsim_rollout_id": KEY_A})
        responses = ResponsesRollout(TASK_A, metadata={"compactsim_rollout_id": KEY_A})
        _run(c, chat)
        _run(c, responses)
        again = ChatRollout(TASK_A, metadata={"compactsim_rollout_id": KEY_A})
        _run(c, again)
        log = _log(c)
    assert chat.answers[-1]["content"] == FINAL_A == again.answers[-1]["content"]
    assert responses.answers[-1]["output"][-1]["content"][0]["text"] == FINAL_A
    assert [(e["turn"], e["attempt"]) for e in log] == [
        *((t, 1) for t in (1, 2, 3, 4)), *((t, 1) for t in (1, 2, 3, 4)), *((t, 2) for t in (1, 2, 3, 4))]


# ---------------------------------------------------------------------------------------------- the rule itself


def test_task_key_ignores_images_and_later_history_but_not_the_task_text():
    plain = {"messages": [SYSTEM, {"role": "user", "content": [{"type": "text", "text": "Open the settings app."}]}]}
    later = {"messages": [*plain["messages"], {"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}]}
    responses = {"input": [{"type": "message", **SYSTEM},
                           {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Open the settings app."},
                                                                            {"type": "input_image", "image_url": IMAGE_URL}]}]}
    assert task_rollout_key(plain) == KEY_A == task_rollout_key(later) == task_rollout_key(responses)
    assert task_rollout_key({"messages": [SYSTEM, TASK_B]}) == KEY_B != KEY_A
    assert task_rollout_key({"messages": [TASK_B]}) != KEY_B  # the system prompt is part of the task
    assert KEY_A.startswith("task-") and len(KEY_A) == len("task-") + 16


def test_call_digest_drops_only_the_compactsim_hints():
    body = {"messages": [TASK_B], "metadata": {"task": "t"}}
    assert call_digest({**body, "metadata": {"task": "t", **meta("r", 2), "compactsim_attempt": "3"}}) == call_digest(body)
    assert call_digest({"messages": [TASK_B], "metadata": meta("r", 1)}) == call_digest({"messages": [TASK_B]})
    assert call_digest({**body, "metadata": {"task": "u"}}) != call_digest(body)


def test_opening_bodies_are_recognised():
    assert opens_episode({"messages": [SYSTEM, TASK_B]})
    assert opens_episode({"input": "hi"})
    assert not opens_episode({"messages": [SYSTEM, TASK_B, {"role": "user", "content": "summary"}]})
    assert not opens_episode({"messages": [SYSTEM]})
    assert not opens_episode({"input": [{"type": "function_call_output", "call_id": "c", "output": "o"}]})


def test_tracker_state_is_per_rollout():
    tracker = CallTracker()
    a1, a2 = {"messages": [TASK_A]}, {"messages": [TASK_A, {"role": "user", "content": "2"}]}
    b1, b2 = {"messages": [TASK_B]}, {"messages": [TASK_B, {"role": "user", "content": "2"}]}
    keys = [tracker.key(b, CallHints()) for b in (a1, b1, b2, a2, a2, b1)]
    assert [(k.turn, k.attempt) for k in keys] == [(1, 1), (1, 1), (2, 1), (2, 1), (2, 2), (1, 2)]
    assert [k.rollout_id for k in keys] == [task_rollout_key(a1), *[task_rollout_key(b1)] * 2, *[task_rollout_key(a1)] * 2,
                                            task_rollout_key(b1)]


def test_prompt_tokens_of_a_derived_call_are_the_rendered_conversation():
    rollout = ChatRollout(TASK_B, compact_at=None)
    with client_for(_settings()) as c:
        body = rollout.prepare()
        r = c.post("/v1/chat/completions", json=body).json()
    assert r["prompt_token_ids"] == list(ct.render_chat(body["messages"]).token_ids)
    assert r["choices"][0]["token_ids"] == ct.encode_action(SCRIPT[KEY_B][0].action())
