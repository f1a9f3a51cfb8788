"""Read one agents' ground-truth log (`compactsim.ground_truth` v1) into the oracle's own frozen records.

Only what the agent recorded is read: the calls' exact prompt/sampled ids, logprobs, routes, the
media ids each prompt showed, the agent's append declaration and boundary, and the media table's
pixels. The identity a trainer can see is derived here too: with a contract the scenario's
rollout id, group id and index; without one (flavour ``none``) only the response id, so such a
rollout is its own group.
"""

from __future__ import annotations

import base64
import binascii
import hashlib

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from compactsim.harness.core.errors import ConfigError
from compactsim.mock_servers.reward_server.rewards import final_answer

GROUND_TRUTH_FORMAT = "compactsim.ground_truth"
GROUND_TRUTH_VERSION = 1
#: The legacy flavour: an ordinary response without any contract.
NO_CONTRACT = "none"


@dataclass(frozen=True, slots=True, eq=False)
class CallTruth:
    """One model call as the agent sent and received it."""

    turn_id: int
    prompt: tuple[int, ...]
    sampled: tuple[int, ...]
    logprobs: tuple[float, ...]
    #: Media ids of the images in this call's prompt, in occurrence order.
    media_ids: tuple[str, ...]
    #: The agent's declaration: this call's prompt extends the previous prompt + sampled ids.
    declared_append: bool
    #: Set when the agent declared a rewrite boundary before this call.
    compaction_event_id: str | None
    policy_version: int | None
    finish_reason: str | None
    #: Routed experts as recorded, (rows, L, K) int64, or None (rows may exceed prompt + sampled).
    routes: np.ndarray | None = field(default=None, repr=False)
    #: Id of the model server's response (a legacy result's only identity is its last call's).
    response_id: str | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.prompt) + len(self.sampled)

    @property
    def context(self) -> tuple[int, ...]:
        """What the next call's prompt must start with to continue this one."""
        return self.prompt + self.sampled


@dataclass(frozen=True, slots=True, eq=False)
class RolloutTruth:
    """One rollout's ground truth, with the identity the trainer sees."""

    #: The scenario's rollout id (what the agent was told).
    spec_rollout_id: str
    group_id: str | None
    task_id: str | None
    rollout_index: int | None
    flavour: str
    completed: bool
    calls: tuple[CallTruth, ...]
    #: media id → data URL of its pixels.
    media: Mapping[str, str]
    logged_reward: float | None
    logged_mask_sample: bool
    #: Text of the final assistant message ("" without one); what a predicate reward reads.
    final_answer: str = ""
    #: The emitted response's id (its last call's response id): a legacy result's only identity.
    response_id: str | None = None
    #: False when the trainer receives this rollout's result without a reward (a batch corruption): it must refuse it.
    reward_delivered: bool = True
    #: Why a rollout that did not complete failed, as the agent logged it ("turn 2: evidence_violation: ...").
    failure: str | None = None

    @property
    def has_contract(self) -> bool:
        return self.flavour != NO_CONTRACT

    @property
    def rollout_id(self) -> str:
        """The logical rollout id a trainer reads: the contract's, else the response id (the last call's)."""
        if self.has_contract:
            return self.spec_rollout_id
        return self.response_id or self.spec_rollout_id

    @property
    def visible_rollout_index(self) -> int | None:
        return self.rollout_index if self.has_contract else None

    @property
    def group_key(self) -> str:
        """GRPO groups by group id, then task id (never by row).

        Without a contract the trainer sees no id at all, and NeMo-RL groups identical first-turn prompts
        (nemo-rl-semantics §3.2): key ``prompt-<first 16 hex of sha256 of the first prompt's ids as compact JSON>``.
        """
        if not self.has_contract:
            if not self.calls:
                return self.rollout_id
            text = "[" + ",".join(str(int(i)) for i in self.calls[0].prompt) + "]"
            return "prompt-" + hashlib.sha256(text.encode("ascii")).hexdigest()[:16]
        return self.group_id or self.task_id or self.rollout_id

    @property
    def num_sampled_tokens(self) -> int:
        return sum(len(c.sampled) for c in self.calls)

    def with_calls(self, calls: Sequence[CallTruth]) -> RolloutTruth:
        return replace(self, calls=tuple(calls))


def _ints(values: Any, where: str) -> tuple[int, ...]:
    if not isinstance(values, list) or any(isinstance(v, bool) or not isinstance(v, int) for v in values):
        raise ConfigError("invalid_argument", f"ground-truth log {where}: expected a list of integers")
    return tuple(values)


#: NeMo-RL's routed-experts wire envelope, ``nrlre1:<int8|int16|int32>:SxLxK:<base64 little-endian>`` (golden spec
#: §5 A): the little-endian dtype of each name.
_ENVELOPE_DTYPES = {"int8": "<i1", "int16": "<i2", "int32": "<i4"}


def _envelope_routes(value: str) -> np.ndarray | str:
    """The [S, L, K] ids an ``nrlre1`` envelope the server sent carries; anything else is returned as it is (an
    evidence error, which the plan's checks name)."""
    parts = value.split(":")
    if len(parts) != 4 or parts[0] != "nrlre1" or parts[1] not in _ENVELOPE_DTYPES:
        return value
    try:
        shape = tuple(int(d) for d in parts[2].split("x"))
        data = base64.b64decode(parts[3], validate=True)
        return np.frombuffer(data, dtype=_ENVELOPE_DTYPES[parts[1]]).reshape(shape).astype(np.int64)
    except (ValueError, binascii.Error):
        return value


def _routes(value: Any) -> np.ndarray | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = _envelope_routes(value)
        if isinstance(value, str):
            return np.asarray(value, dtype=object)  # not routes: left to the evidence checks, as any malformed value
    arr = np.asarray(value)
    if arr.dtype == object:
        return arr
    return arr.astype(np.int64) if arr.size else arr.reshape((0, 0, 0)).astype(np.int64)


def _final_answer(calls: Sequence[Mapping[str, Any]]) -> str:
    """The last call's final assistant text, read exactly as the reward server reads a response."""
    if not calls:
        return ""
    return final_answer({"output": calls[-1]["received"].get("output_items") or []})


def media_table(log: Mapping[str, Any]) -> dict[str, str]:
    """media id → data URL of a ground-truth log's media table (entries without pixels left out)."""
    table = {mid: m.get("data_url") for mid, m in (log.get("media") or {}).items() if isinstance(m, Mapping)}
    return {k: v for k, v in table.items() if isinstance(v, str)}


def read_truth(log: Mapping[str, Any]) -> RolloutTruth:
    """Parse one ground-truth log; `ConfigError("invalid_argument")` when it is not one."""
    if not isinstance(log, Mapping) or log.get("format") != GROUND_TRUTH_FORMAT:
        raise ConfigError("invalid_argument", f"not a ground-truth log: format={getattr(log, 'get', lambda _k: None)('format')!r}")
    if log.get("version") != GROUND_TRUTH_VERSION:
        raise ConfigError("invalid_argument", f"ground-truth log version {log.get('version')!r}; the oracle reads {GROUND_TRUTH_VERSION}")
    rollout, outcome = log["rollout"], log["outcome"]
    calls: list[CallTruth] = []
    for k, entry in enumerate(log["calls"]):
        rec, sent, comp = entry["received"], entry["sent"], entry["compaction"]
        where = f"rollout {rollout['rollout_id']!r} calls[{k}]"
        logprobs = rec["generation_log_probs"]
        if not isinstance(logprobs, list):
            raise ConfigError("invalid_argument", f"ground-truth log {where}.received.generation_log_probs: expected a list")
        version = rec.get("policy_version")
        calls.append(
            CallTruth(
                turn_id=int(entry["turn_id"]),
                prompt=_ints(rec["prompt_token_ids"], f"{where}.received.prompt_token_ids"),
                sampled=_ints(rec["generation_token_ids"], f"{where}.received.generation_token_ids"),
                logprobs=tuple(float(x) for x in logprobs),
                media_ids=tuple(sent["media_ids"]),
                declared_append=bool(comp["declared_append_compatible"]),
                compaction_event_id=entry["ids"].get("compaction_event_id"),
                policy_version=version if isinstance(version, int) and not isinstance(version, bool) else None,
                finish_reason=rec.get("finish_reason"),
                routes=_routes(rec.get("routed_experts")),
                response_id=rec.get("response_id"),
            )
        )
    media = media_table(log)
    reward = outcome.get("reward")
    return RolloutTruth(
        spec_rollout_id=str(rollout["rollout_id"]),
        group_id=rollout.get("group_id"),
        task_id=rollout.get("task_id"),
        rollout_index=rollout.get("rollout_index"),
        flavour=str(rollout["flavour"]),
        completed=outcome.get("status") == "completed",
        calls=tuple(calls),
        media=media,
        logged_reward=None if reward is None else float(reward),
        logged_mask_sample=bool(outcome.get("mask_sample", False)),
        final_answer=_final_answer(log["calls"]),
        response_id=calls[-1].response_id if calls else None,
        failure=_failure(outcome.get("failure")),
    )


def _failure(failure: Any) -> str | None:
    if not isinstance(failure, Mapping):
        return None
    return f"turn {failure.get('turn_id')}: {failure.get('kind')}: {failure.get('detail')}"


__all__ = ["GROUND_TRUTH_FORMAT", "GROUND_TRUTH_VERSION", "NO_CONTRACT", "CallTruth", "RolloutTruth", "read_truth"]
