"""Digest rules: recompute every id and digest three ways (as declared, by the revision, by us) and compare.

A difference between the revision's own functions and `compactsim.harness.core.digests` is a digest-rule
change: our emitter would stop matching Gym, and for `generation_evidence_digest` (which the
planner verifies) the planner would reject every real payload. A declared value that matches
neither says the payload itself is stale.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from compactsim.harness.core import digests as ours_digests
from compactsim.harness.core.contract import TOKEN_FIELDS

CheckStatus = Literal["ok", "rule_changed", "payload_stale", "error"]
#: Ids the planner itself recomputes; a rule change there rejects every real payload.
PLANNER_CHECKED: frozenset[str] = frozenset({"generation_evidence_digest", "canonical_digest"})

#: Fixed inputs that exercise the canonical JSON rules (key order, unicode, float repr, nesting).
PRIMITIVE_PROBES: tuple[dict[str, Any], ...] = (
    {"name": "canonical_digest(nested, unsorted keys)", "fn": "canonical_digest",
     "args": [{"b": [1, 2.5, -1.0], "a": {"z": None, "y": True}}]},
    {"name": "canonical_digest(unicode)", "fn": "canonical_digest", "args": ["ünïcødé ✓ 画像"]},
    {"name": "canonical_digest(float repr)", "fn": "canonical_digest", "args": [[1e-07, 0.1, -0.0, 1e16, 3.0, -0.125]]},
    {"name": "canonical_digest(evidence recipe)", "fn": "canonical_digest",
     "args": [{"prompt_token_ids": [1, 2, 3], "sampled_token_ids": [11, 12], "sampled_logprobs": [-0.5, -0.25]}]},
    {"name": "stable_id(prefix, mixed parts)", "fn": "stable_id", "args": ["prefix", 1, "a", [1, 2], {"k": "v"}]},
    {"name": "ordered_id_digest(ids)", "fn": "ordered_id_digest", "args": [["a", "b", "c"]]},
)
_OUR_FUNCTIONS: dict[str, Callable[..., str]] = {
    "canonical_digest": ours_digests.canonical_digest,
    "stable_id": ours_digests.stable_id,
    "ordered_id_digest": lambda ids: ours_digests.ordered_id_digest(ids),
}


@dataclass(frozen=True, slots=True)
class DigestCheck:
    """One id or digest, as declared in a payload, as the revision computes it, and as we do."""

    payload: str
    field: str
    declared: str | None
    revision: str | None
    ours: str | None
    error: str | None = None

    @property
    def status(self) -> CheckStatus:
        if self.error is not None:
            return "error"
        if self.revision is not None and self.ours is not None and self.revision != self.ours:
            return "rule_changed"
        expected = self.revision if self.revision is not None else self.ours
        if self.declared is not None and expected is not None and self.declared != expected:
            return "payload_stale"
        return "ok"

    @property
    def planner_checked(self) -> bool:
        return any(name in self.field for name in PLANNER_CHECKED)

    def to_json(self) -> dict[str, Any]:
        return {
            "payload": self.payload,
            "field": self.field,
            "declared": self.declared,
            "revision": self.revision,
            "ours": self.ours,
            "error": self.error,
            "status": self.status,
            "planner_checked": self.planner_checked,
        }


def primitive_checks(revision_results: Sequence[Mapping[str, Any]]) -> list[DigestCheck]:
    """Compare the revision's answers to `PRIMITIVE_PROBES` with ours."""
    by_name = {r["name"]: r for r in revision_results}
    out = []
    for probe in PRIMITIVE_PROBES:
        theirs = by_name.get(probe["name"], {"error": "not evaluated"})
        ours = _OUR_FUNCTIONS[probe["fn"]](*probe["args"])
        out.append(DigestCheck("<probes>", probe["name"], None, theirs.get("value"), ours, theirs.get("error")))
    return out


def _response(payload: Mapping[str, Any]) -> Mapping[str, Any]:
    return payload["response"] if "response" in payload and "output" not in payload else payload


def _token_items(response: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [i for i in response.get("output", []) if isinstance(i, Mapping) and all(k in i for k in TOKEN_FIELDS)]


def our_call_ids(record: Mapping[str, Any], item: Mapping[str, Any] | None) -> dict[str, str]:
    """Every per-call id we know the recipe for (reference §1.3), computed with `compactsim.harness.core.digests`."""
    prompt = list(record.get("prompt_token_ids") or (item or {}).get("prompt_token_ids") or [])
    sampled = list(record.get("sampled_token_ids") or (item or {}).get("generation_token_ids") or [])
    logprobs = list(record.get("sampled_logprobs") or (item or {}).get("generation_log_probs") or [])
    turn = int(record["turn_id"])
    rollout_id = record["rollout_id"]
    identity = ours_digests.canonical_digest(
        {"rollout_id": rollout_id, "turn_id": turn, "prompt_token_ids": prompt, "sampled_token_ids": sampled}
    )
    completion_id = f"completion-{turn:06d}-{identity[:12]}"
    action_id = f"action-{turn:06d}"
    request_id = ours_digests.stable_id("request", record.get("prepared_request_id"), prompt, list(record.get("media_ids", [])))
    model_call_id = ours_digests.stable_id("model-call", request_id, completion_id)
    return {
        "generation_evidence_digest": ours_digests.generation_evidence_digest(prompt, sampled, logprobs),
        "completion_id": completion_id,
        "action_id": action_id,
        "request_id": request_id,
        "policy_output_spans[0].model_call_id": model_call_id,
        "policy_output_spans[0].policy_output_span_id": ours_digests.stable_id(
            "policy-output-span", model_call_id, action_id, len(sampled)
        ),
    }


def _declared(record: Mapping[str, Any], field: str) -> Any:
    if field.startswith("policy_output_spans[0]."):
        spans = record.get("policy_output_spans") or [{}]
        return spans[0].get(field.split(".", 1)[1])
    return record.get(field)


def payload_checks(name: str, payload: Mapping[str, Any], revision: Mapping[str, Any] | None) -> list[DigestCheck]:
    """Per-call ids, media ids and the generation-contract id of one payload."""
    response = _response(payload)
    items = _token_items(response)
    records = response.get("model_call_metadata") or response.get("completion_evidence") or []
    rev_calls = {c["index"]: c for c in (revision or {}).get("calls", [])}
    out: list[DigestCheck] = []
    for index, record in enumerate(records):
        item = items[index] if index < len(items) else None
        rev = rev_calls.get(index, {})
        rev_value = rev.get("value") or {}
        ours = our_call_ids(record, item)
        for field, our_value in ours.items():
            out.append(DigestCheck(
                name, f"call {record.get('turn_id')} {field}", _declared(record, field),
                _declared(rev_value, field) if rev_value else None, our_value, rev.get("error") if revision else None,
            ))
    rev_media = {m["key"]: m for m in (revision or {}).get("media", [])}
    for key, asset in sorted((response.get("media_assets") or {}).items()):
        if not isinstance(asset, Mapping) or "source_part" not in asset:
            continue
        content = ours_digests.canonical_digest(asset["source_part"])
        rev = rev_media.get(key, {})
        value = rev.get("value") or {}
        out.append(DigestCheck(name, f"media {key} media_id", key, value.get("media_id"), f"media-{content[:24]}", rev.get("error")))
        out.append(DigestCheck(name, f"media {key} content_digest", asset.get("content_digest"), value.get("content_digest"),
                               content, rev.get("error")))
    contract = next((response[k] for k in ("context_compaction_contract", "rollout_trace_contract") if isinstance(response.get(k), Mapping)), None)
    generation = contract.get("generation_contract") if contract else None
    if isinstance(generation, Mapping):
        components = {k: generation.get(k) for k in (
            "model_contract_id", "tokenizer_contract_id", "template_contract_id",
            "sampling_contract_id", "processor_contract_id", "compaction_policy_id")}
        ours_id = ours_digests.stable_id("generation-contract", ours_digests.canonical_digest(components))
        rev = (revision or {}).get("generation_contract") or {}
        out.append(DigestCheck(name, "generation_contract_id", generation.get("generation_contract_id"),
                               (rev.get("value") or {}).get("generation_contract_id"), ours_id, rev.get("error")))
    for event in response.get("boundary_events") or []:
        if not isinstance(event, Mapping) or contract is None:
            continue
        step = event.get("applies_to_step")
        if not isinstance(step, int):
            continue
        digest = ours_digests.canonical_digest({
            "rollout_id": contract.get("rollout_id"), "applies_to_step": step,
            "previous_view_digest": event.get("previous_view_digest"), "current_view_digest": event.get("current_view_digest"),
        })
        out.append(DigestCheck(name, f"boundary {step} event_id", event.get("event_id"), None, f"boundary-{step:06d}-{digest[:12]}"))
    return out


__all__ = [
    "PLANNER_CHECKED",
    "PRIMITIVE_PROBES",
    "CheckStatus",
    "DigestCheck",
    "our_call_ids",
    "payload_checks",
    "primitive_checks",
]
