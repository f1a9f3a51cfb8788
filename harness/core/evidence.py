"""The internal, flavour-independent record of one logical rollout's model calls.

Every accepted Gym shape (0.7.0 transport/full, PR #2870, OSWorld extras, no contract) is
normalised into one `RolloutEvidence`; everything downstream reads only this.
"""

from __future__ import annotations

import hashlib
import json

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

#: Which producer shape a result came in.
Flavour = Literal[
    "gym-0.7.0-transport",  # context_compaction_contract, schema_version 3
    "gym-0.7.0-full",  # context_compaction_contract, schema_version 2 (completion_evidence)
    "gym-pr2870",  # rollout_trace_contract, no schema_version/mode
    "osworld",  # OSWorld exact_trace dict emitter (extras on contract and metadata)
    "none",  # ordinary response without a contract (legacy single-trace path)
]

FLAVOURS: tuple[str, ...] = ("gym-0.7.0-transport", "gym-0.7.0-full", "gym-pr2870", "osworld", "none")


@dataclass(frozen=True, slots=True, eq=False)
class ModelCall:
    """One generation request inside a rollout, with its exact token evidence.

    `routed_experts` is `None` or an int array `[S, L, K]` in vLLM's packing (S = prompt +
    sampled, possibly +1 surplus row; last valid row a placeholder `arange(K)`).
    """

    turn_id: int
    prompt_token_ids: tuple[int, ...]
    sampled_token_ids: tuple[int, ...]
    sampled_logprobs: tuple[float, ...]
    media_ids: tuple[str, ...] = ()
    routed_experts: np.ndarray | None = None
    #: Gym's declaration; None when the result carries no contract.
    expected_append_compatible: bool | None = None
    compaction_event_id: str | None = None
    finish_reason: str | None = None
    policy_version: int | None = None
    #: Digest the producer recorded for this call's arrays (None when absent).
    declared_digest: str | None = None
    #: Index of the token-bearing item in `response.output` (for diagnostics).
    output_index: int = -1

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.sampled_token_ids)


@dataclass(frozen=True, slots=True)
class BoundaryEvent:
    """A declared rewrite boundary (Gym `RewriteBoundaryEvent`), reduced to what the planner reads."""

    event_id: str
    trigger_after_step: int
    applies_to_step: int
    reason: str = "history_policy_rewrite"
    retained_media_count: int | None = None
    removed_media_count: int | None = None


@dataclass(frozen=True, slots=True)
class MediaAsset:
    """One entry of `media_assets`: the id and the part that carries the pixels."""

    media_id: str
    content_digest: str | None
    source_part: dict[str, Any]
    original_dimensions: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True, eq=False)
class RolloutEvidence:
    """A logical rollout as the trainer receives it, normalised."""

    rollout_id: str
    flavour: str
    calls: tuple[ModelCall, ...]
    group_id: str | None = None
    task_id: str | None = None
    rollout_index: int | None = None
    boundary_events: tuple[BoundaryEvent, ...] = ()
    media_assets: dict[str, MediaAsset] = field(default_factory=dict)
    reward: float | None = None
    mask_sample: bool = False
    #: Where the contract came from, e.g. "context_compaction_contract"; None without one.
    contract_key: str | None = None
    #: Number of model_call_metadata / completion_evidence records (None without a contract).
    metadata_count: int | None = None

    @property
    def has_contract(self) -> bool:
        return self.contract_key is not None

    @property
    def group_key(self) -> str:
        """GRPO groups are keyed by task/group id, never by row.

        A legacy result (no contract) names no group: NeMo-RL then groups by the token content of the
        first-turn prompt (nemo-rl-semantics §3.2), so its key is ``prompt-`` + the first 16 hex digits of
        sha256 over the first call's prompt ids written as JSON (``[1,2,3]``, no spaces). A contract result
        without group or task id is its own group.
        """
        if self.group_id or self.task_id:
            return str(self.group_id or self.task_id)
        if not self.has_contract and self.calls:
            ids = json.dumps(list(self.calls[0].prompt_token_ids), separators=(",", ":"))
            return "prompt-" + hashlib.sha256(ids.encode("ascii")).hexdigest()[:16]
        return self.rollout_id

    @property
    def num_sampled_tokens(self) -> int:
        return sum(len(c.sampled_token_ids) for c in self.calls)


__all__ = ["FLAVOURS", "BoundaryEvent", "Flavour", "MediaAsset", "ModelCall", "RolloutEvidence"]
