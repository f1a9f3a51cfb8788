"""The one error vocabulary of compactsim.

Exception tree::

    CompactsimError                 root of everything compactsim raises on purpose
    ├── ContractError               evidence breaks the Gym/trainer contract (.code, .rollout_id, .turn_id, .detail)
    └── ConfigError (ValueError)    a trainer/scenario/CLI setting is invalid or unsupported (.code, .detail)

`ContractError.code` is a closed vocabulary (`ContractCode`): each code has exactly one
meaning, listed in `CONTRACT_CODES` with its common causes. Never reuse a code for two
meanings; add a new one instead.
"""

from __future__ import annotations

from typing import Literal, get_args

ContractCode = Literal[
    "malformed_payload",
    "unsupported_contract",
    "undeclared_discontinuity",
    "append_declaration_mismatch",
    "boundary_without_rewrite",
    "unknown_media_asset",
    "media_continuity",
    "token_logprob_length_mismatch",
    "evidence_digest_mismatch",
    "orphan_compaction_event",
    "missing_token_evidence",
    "metadata_count_mismatch",
    "turn_order",
    "rollout_id_mismatch",
    "routed_experts_shape",
    "duplicate_logical_rollout_id",
    "duplicate_physical_trace_id",
    "incomplete_group",
    "no_eligible_tokens",
    "mixed_policy_versions",
    "empty_trace",
    "inconsistent_routed_expert_shapes",
    "media_decode",
    "oversized_group",
    "logprob_out_of_range",
    "routed_expert_id_out_of_range",
    "media_digest_mismatch",
    "media_asset_key_mismatch",
    "media_dimensions_mismatch",
    "missing_routed_experts",
    "sequence_too_long",
]

#: Every contract code with the situations that usually produce it.
CONTRACT_CODES: dict[str, str] = {
    "malformed_payload": "JSON that is not a Gym result: wrong types, missing required fields, bad JSON, numbers "
    "outside their field's range (non-finite, or integers too large to be exact floats), nesting past the cap.",
    "unsupported_contract": "A contract key or schema_version/mode this consumer does not know.",
    "undeclared_discontinuity": "A prompt that does not extend the previous context and no boundary declares it "
    "(token merging/retokenization, truncated history, stripped reasoning).",
    "append_declaration_mismatch": "A call declared append-compatible whose prompt does not extend the previous "
    "prompt + sampled ids (spoofed or stale declaration).",
    "boundary_without_rewrite": "A boundary applied to a call whose prompt is in fact a prefix continuation.",
    "unknown_media_asset": "A call references a media id absent from media_assets.",
    "media_continuity": "Inside one physical trace, a call's media ids do not extend the previous call's.",
    "token_logprob_length_mismatch": "Sampled token ids and their logprobs have different lengths.",
    "evidence_digest_mismatch": "generation_evidence_digest does not recompute from the output's token arrays.",
    "orphan_compaction_event": "compaction_event_id names no boundary event applying to this turn, or a boundary "
    "event is not referenced by the call it applies to.",
    "missing_token_evidence": "A model call has no (or more than one) token-bearing output item.",
    "metadata_count_mismatch": "model_call_metadata count differs from the number of token-bearing output items.",
    "turn_order": "turn_id values are not 1, 2, 3, ... in output order.",
    "rollout_id_mismatch": "A record's rollout_id differs from the contract's rollout_id.",
    "routed_experts_shape": "routed_experts is not [prompt+sampled (+1 surplus), layers, topk] with layers, topk >= 1, "
    "or its nrlre1 envelope has non-positive or oversized dimensions or a byte length that does not match them.",
    "duplicate_logical_rollout_id": "Two results in one batch share a logical rollout id.",
    "duplicate_physical_trace_id": "Two physical rows in one batch share a physical trace id.",
    "incomplete_group": "A group has fewer rollouts than num_generations_per_prompt.",
    "no_eligible_tokens": "A rollout has no sampled token to train on.",
    "mixed_policy_versions": "One optimizer batch mixes generation policy versions where that is not allowed.",
    "empty_trace": "A physical trace with no model call.",
    "inconsistent_routed_expert_shapes": "Routed-expert tensors disagree on layers/topk across rows.",
    "media_decode": "A media asset's source_part cannot be decoded into pixels.",
    "oversized_group": "A group has more rollouts than num_generations_per_prompt (two tasks share a group id, "
    "or one rollout was submitted twice under different ids).",
    "logprob_out_of_range": "A generation logprob above 0 (a probability above 1): the producer wrote "
    "probabilities, scores or a sign-flipped value where vLLM's log-probabilities belong.",
    "routed_expert_id_out_of_range": "A routed expert id below -1 (the only negative id, the missing-route "
    "sentinel): a corrupted route envelope or a producer using another sentinel.",
    "media_digest_mismatch": "A media asset's content_digest (or its content-addressed media-<24 hex> id) does not "
    "recompute from its source_part: the image was replaced after Gym registered it.",
    "media_asset_key_mismatch": "A media_assets key differs from the asset's own media_id (an asset filed under "
    "another image's id, or a key rewritten without the asset).",
    "media_dimensions_mismatch": "An asset's original_dimensions differ from the width x height of its decoded "
    "pixels (an image swapped for one of another size).",
    "missing_routed_experts": "policy.router_replay_enabled is on but the batch carries no routed experts (the model "
    "server was not started with route capture, or the evidence lost them): NeMo-RL's require_routed_experts refuses "
    "the step rather than train without replay.",
    "sequence_too_long": "A physical row is longer than policy.max_total_sequence_length: the trainer refuses it "
    "rather than truncate what the policy saw (compact harder, or raise the cap).",
}

assert set(CONTRACT_CODES) == set(get_args(ContractCode)), "CONTRACT_CODES out of sync with ContractCode"

ConfigCode = Literal["unsupported_config", "invalid_config", "invalid_seed", "invalid_argument", "worker_failed"]


class CompactsimError(Exception):
    """Root of every error compactsim raises on purpose."""


class ContractError(CompactsimError):
    """Evidence violates the contract; names the rollout and turn so a person can act on it."""

    def __init__(
        self,
        code: ContractCode,
        *,
        rollout_id: str | None = None,
        turn_id: int | None = None,
        detail: str = "",
    ) -> None:
        if code not in CONTRACT_CODES:
            raise ValueError(f"unknown contract code {code!r}")  # programming error, not user input
        self.code: ContractCode = code
        self.rollout_id = rollout_id
        self.turn_id = turn_id
        self.detail = detail
        super().__init__(self._render())

    def _render(self) -> str:
        where = f"rollout {self.rollout_id!r}" if self.rollout_id is not None else "rollout unknown"
        if self.turn_id is not None:
            where += f", turn {self.turn_id}"
        return f"{self.code} ({where}): {self.detail}"

    def to_json(self) -> dict[str, object]:
        """The stable machine-readable form printed by `--json` commands."""
        return {
            "error_code": self.code,
            "rollout_id": self.rollout_id,
            "turn_id": self.turn_id,
            "message": str(self),
        }

    def __reduce__(self):  # picklable across Ray/process boundaries
        return (_rebuild_contract_error, (self.code, self.rollout_id, self.turn_id, self.detail))


def _rebuild_contract_error(code: ContractCode, rollout_id: str | None, turn_id: int | None, detail: str) -> ContractError:
    return ContractError(code, rollout_id=rollout_id, turn_id=turn_id, detail=detail)


class ConfigError(CompactsimError, ValueError):
    """A setting is invalid or unsupported; `violations` lists every problem found at once."""

    def __init__(self, code: ConfigCode, detail: str, *, violations: tuple[str, ...] = ()) -> None:
        self.code: ConfigCode = code
        self.detail = detail
        self.violations = violations
        text = f"{code}: {detail}"
        if violations:
            text += "\n" + "\n".join(f"  - {v}" for v in violations)
        super().__init__(text)

    def __reduce__(self):
        return (_rebuild_config_error, (self.code, self.detail, self.violations))


def _rebuild_config_error(code: ConfigCode, detail: str, violations: tuple[str, ...]) -> ConfigError:
    return ConfigError(code, detail, violations=violations)


__all__ = [
    "CONTRACT_CODES",
    "CompactsimError",
    "ConfigCode",
    "ConfigError",
    "ContractCode",
    "ContractError",
]
