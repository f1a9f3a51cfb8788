"""Pure reward selection: identity and final answer read from a Gym response, then the rule applied."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from compactsim.mock_servers.reward_server.settings import RewardSettings

_CONTRACT_KEYS = ("context_compaction_contract", "rollout_trace_contract")


class IdentityError(ValueError):
    """A rollout identity in the response's contract the reward cannot be chosen by; `loc` is its place in the body."""

    def __init__(self, loc: tuple[str, ...], msg: str) -> None:
        super().__init__(msg)
        self.loc, self.msg = loc, msg


def rollout_identity(response: Mapping[str, Any], *, rollout_id: str | None, rollout_index: int | None) -> tuple[str | None, int | None]:
    """Explicit request fields first, then the response's contract (either key).

    Raises `IdentityError` for a contract `rollout_id` that is not a string, a `rollout_index` that is not an int
    >= 0 (a -1 would pick the pattern's last reward), or two contracts that disagree: each would choose a reward
    for a rollout the body does not name.
    """
    seen: dict[str, tuple[str, Any]] = {}
    for key in _CONTRACT_KEYS:
        contract = response.get(key)
        if not isinstance(contract, Mapping):
            continue
        for field, ok, want in (("rollout_id", lambda v: isinstance(v, str), "a string"),
                                ("rollout_index", lambda v: type(v) is int and v >= 0, "an integer >= 0")):
            value = contract.get(field)
            if value is None:
                continue
            if not ok(value):
                raise IdentityError(("response", key, field), f"expected {want}, found {value!r}")
            if field in seen and seen[field][1] != value:
                raise IdentityError(("response", key, field), f"{value!r} disagrees with {seen[field][0]}.{field} "
                                                              f"{seen[field][1]!r}")
            seen[field] = (key, value)
    if rollout_id is None and "rollout_id" in seen:
        rollout_id = seen["rollout_id"][1]
    if rollout_index is None and "rollout_index" in seen:
        rollout_index = seen["rollout_index"][1]
    return rollout_id, rollout_index


def final_answer(response: Mapping[str, Any]) -> str:
    """The text of the last assistant message in `output` ("" when there is none)."""
    output = response.get("output")
    for item in reversed(output if isinstance(output, list) else []):
        if isinstance(item, Mapping) and item.get("type") == "message" and item.get("role") == "assistant":
            content = item.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return "".join(p.get("text", "") for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str))
    return ""


def choose_reward(settings: RewardSettings, *, rollout_id: str | None, rollout_index: int | None, answer: str) -> float:
    """The configured reward for one rollout."""
    if rollout_id is not None and rollout_id in settings.by_rollout_id:
        return settings.by_rollout_id[rollout_id]
    rule = settings.rule
    if rule.kind == "fixed":
        return rule.value
    if rule.kind == "by_index":
        return rule.rewards.get(rollout_index, rule.default) if rollout_index is not None else rule.default
    if rule.kind == "pattern":
        return rule.pattern[(rollout_index or 0) % len(rule.pattern)]
    hit = answer == rule.equals if rule.equals is not None else (rule.contains or "") in answer
    return rule.reward_true if hit else rule.reward_false


def mask_sample(settings: RewardSettings, *, rollout_id: str | None, rollout_index: int | None) -> bool:
    return (rollout_index is not None and rollout_index in settings.mask_sample_indices) or (
        rollout_id is not None and rollout_id in settings.mask_sample_rollout_ids
    )


__all__ = ["IdentityError", "choose_reward", "final_answer", "mask_sample", "rollout_identity"]
