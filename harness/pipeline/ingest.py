"""Validate one Gym result once at the edge and normalise it into a `RolloutEvidence`.

Accepts Gym's `/run` result (`{"response": {...}, "reward": ...}`) or the bare response, in
every flavour of DESIGN §5. Structural problems that make a payload unreadable raise at once
(`malformed_payload`, `unsupported_contract`); problems a non-strict plan can still describe are
returned as violations beside the evidence so the planner can report them all.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from pydantic import ValidationError

from compactsim.harness.core.contract import (
    CONTRACT_KEYS,
    TOKEN_FIELDS,
    TRAINER_POLICY_VERSION,
    CallRecord,
    GymResponse,
    ObservedCompletion,
    RolloutContract,
    RunResult,
    TokenFields,
)
from compactsim.harness.core.digests import (
    MAX_DIGEST_DEPTH,
    EvidenceDigestChain,
    canonical_digest,
    generation_evidence_digest,
    nesting_depth,
)
from compactsim.harness.core.errors import ContractError
from compactsim.harness.core.evidence import BoundaryEvent, MediaAsset, ModelCall, RolloutEvidence
from compactsim.harness.core.trace_plan import Violation

#: NeMo-RL's routed-experts wire envelope: "nrlre1:<dtype>:<S>x<L>x<K>:<base64 LE bytes>".
_ROUTES_MAGIC = "nrlre1"
_ROUTES_DTYPES = {"int8": np.int8, "int16": np.int16, "int32": np.int32}
#: One envelope dimension: ASCII decimal digits only (no sign, no spaces, no underscores).
_ROUTE_DIM = re.compile(r"[0-9]{1,10}")
#: Most route entries one call may carry (S x L x K): 128k tokens x 128 layers x 16 experts.
MAX_ROUTE_ELEMENTS: int = 1 << 28
#: OSWorld's exact_trace emitter adds these keys to its contract.
_OSWORLD_CONTRACT_KEYS = ("identity_source", "trajectory_contract_id")
#: Content-part types Gym registers as images (gym-contract §2.4).
_IMAGE_PART_TYPES = ("input_image", "image", "image_url")
UNKNOWN_ROLLOUT = "<unknown>"


@dataclass(frozen=True, slots=True)
class Ingested:
    """Normalised evidence plus the violations found while reading it."""

    evidence: RolloutEvidence
    violations: tuple[Violation, ...]




def normalize_result(obj: object) -> RolloutEvidence:
    """Strictly normalise one result; raise `ContractError` on the first violation."""
    ingested = ingest_result(obj)
    if ingested.violations:
        v = ingested.violations[0]
        raise ContractError(v.code, rollout_id=ingested.evidence.rollout_id, turn_id=v.turn_id, detail=v.detail)  # type: ignore[arg-type]
    return ingested.evidence


def ingest_result(obj: object) -> Ingested:
    """Read one result; raise only when it cannot be read at all."""
    if not isinstance(obj, Mapping):
        raise ContractError("malformed_payload", detail=f"a result must be a JSON object, got {type(obj).__name__}")
    raw_response, envelope = _split_envelope(obj)
    rollout_hint = _rollout_hint(raw_response)
    try:
        result = RunResult.model_validate(envelope) if envelope is not None else None
        response = result.response if result is not None else GymResponse.model_validate(raw_response)
    except ValidationError as exc:
        raise _malformed(exc, rollout_hint) from None

    contract_key, contract = _find_contract(response, raw_response, rollout_hint)
    flavour = _flavour(contract_key, contract, raw_response)
    rollout_id = contract.rollout_id if contract is not None else _legacy_rollout_id(raw_response)
    violations: list[Violation] = []

    token_items = _token_items(response, raw_response, rollout_id, violations)
    records: list[CallRecord] | None = None
    if flavour == "gym-0.7.0-full":
        records = list(response.completion_evidence or [])
    elif contract is not None:
        records = list(response.model_call_metadata or [])
    calls = _build_calls(token_items, records, rollout_id, flavour, violations)
    # the trainer's own label (harness.core.contract.TRAINER_POLICY_VERSION, validated by RunResult as a
    # non-negative int32); Gym never sends a version
    label = result.trainer_policy_version if result is not None else None
    if label is not None:
        calls = [c if c.policy_version is not None else replace(c, policy_version=label) for c in calls]
    media_assets = _declared_assets(response, rollout_id)
    if contract is None:
        calls, media_assets = _bin_legacy_media(calls, envelope, raw_response, rollout_id)

    reward = None
    mask_sample = False
    if result is not None:
        reward = float(result.reward) if result.reward is not None else None
        mask_sample = bool(result.instance_config.mask_sample) if result.instance_config else False

    evidence = RolloutEvidence(
        rollout_id=rollout_id,
        flavour=flavour,
        calls=tuple(calls),
        group_id=contract.group_id if contract else None,
        task_id=contract.task_id if contract else None,
        rollout_index=contract.rollout_index if contract else None,
        boundary_events=tuple(
            BoundaryEvent(
                event_id=e.event_id,
                trigger_after_step=e.trigger_after_step,
                applies_to_step=e.applies_to_step,
                reason=e.reason,
                retained_media_count=e.retained_media_count,
                removed_media_count=e.removed_media_count,
            )
            for e in response.boundary_events
        ),
        media_assets=media_assets,
        reward=reward,
        mask_sample=mask_sample,
        contract_key=contract_key,
        metadata_count=len(records) if records is not None else None,
    )
    return Ingested(evidence=evidence, violations=tuple(violations))


# ---------------------------------------------------------------------------------------------
# envelope and contract


def _split_envelope(obj: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any] | None]:
    """Return (response dict, /run envelope or None)."""
    if "response" in obj and "output" not in obj:
        response = obj["response"]
        if not isinstance(response, Mapping):
            raise ContractError(
                "malformed_payload", detail=f"response: expected a JSON object, got {type(response).__name__}"
            )
        return response, obj
    return obj, None


def _rollout_hint(raw: Mapping[str, Any]) -> str | None:
    for key in CONTRACT_KEYS:
        c = raw.get(key)
        if isinstance(c, Mapping) and isinstance(c.get("rollout_id"), str):
            return c["rollout_id"]
    return raw.get("id") if isinstance(raw.get("id"), str) else None


def _legacy_rollout_id(raw: Mapping[str, Any]) -> str:
    """Without a contract the response `id` is the logical rollout id, the only identity the result carries.

    Gym's response model requires it as a string; one without it would otherwise train under a
    made-up name (and two of them collide), so it is `malformed_payload` before any token item is read.
    """
    rid = raw.get("id")
    if isinstance(rid, str):
        return rid
    json_types = {bool: "a boolean", int: "a number", float: "a number", list: "an array", type(None): "null"}
    got = "no id" if "id" not in raw else json_types.get(type(rid), "an object")
    raise ContractError("malformed_payload", rollout_id=None, turn_id=None,
                        detail=f"response.id: a response without a contract needs a string id (its logical rollout "
                               f"id), got {got}")


def _malformed(exc: ValidationError, rollout_id: str | None) -> ContractError:
    first = _first_error(exc)
    path = _format_loc(first["loc"])
    more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    turn = _turn_from_loc(first["loc"])
    return ContractError(
        "malformed_payload",
        rollout_id=rollout_id,
        turn_id=turn,
        detail=f"{path}: {first['msg']}{more}",
    )


#: Pydantic names the branch of a union in the error location ("constrained-float", "str", ...; a
#: branch with a validator, like `Number`'s float branch, as "function-before[<validator>(), float]").
_UNION_TAG = re.compile(r"(constrained-)?(float|int|str|bool|none|list\[.*\]|dict\[.*\])"
                        r"|function-(before|after|wrap|plain)\[.*\]")


def _first_error(exc: ValidationError) -> Any:
    """The first error; among the union branches tried at its location, a value error beats a type error.

    A list of route ids with a -5 fails the `str` branch ("not a string") and the list branch
    (`[0][0][0]` below -1); the second is the one a person can act on.
    """
    errors = exc.errors()
    where = _format_loc(errors[0]["loc"])
    inside = [e for e in errors if _format_loc(e["loc"]).startswith(where)]
    return next((e for e in inside if not str(e["type"]).endswith("_type")), errors[0])


def _format_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not _UNION_TAG.fullmatch(str(part)):
            out += ("." if out else "") + str(part)
    return out or "<root>"


def _turn_from_loc(loc: tuple[Any, ...]) -> int | None:
    for i, part in enumerate(loc[:-1]):
        if part in ("model_call_metadata", "completion_evidence") and isinstance(loc[i + 1], int):
            return loc[i + 1] + 1
    return None


def _find_contract(
    response: GymResponse, raw: Mapping[str, Any], rollout_hint: str | None
) -> tuple[str | None, RolloutContract | None]:
    present = [k for k in CONTRACT_KEYS if raw.get(k) is not None]
    unknown = sorted(
        k for k in raw if isinstance(k, str) and k.endswith("_contract") and k not in CONTRACT_KEYS and raw[k] is not None
    )
    if unknown and not present:
        raise ContractError(
            "unsupported_contract",
            rollout_id=rollout_hint,
            detail=f"unknown contract key(s) {unknown}; this consumer reads {list(CONTRACT_KEYS)}",
        )
    if not present:
        return None, None
    cc, rt = response.context_compaction_contract, response.rollout_trace_contract
    if cc is not None and rt is not None and cc.rollout_id != rt.rollout_id:
        raise ContractError(
            "rollout_id_mismatch",
            rollout_id=cc.rollout_id,
            detail=f"context_compaction_contract.rollout_id={cc.rollout_id!r} but "
            f"rollout_trace_contract.rollout_id={rt.rollout_id!r}",
        )
    if cc is not None:
        return "context_compaction_contract", cc
    return "rollout_trace_contract", rt


def _flavour(key: str | None, contract: RolloutContract | None, raw: Mapping[str, Any]) -> str:
    if key is None or contract is None:
        return "none"
    raw_contract = raw[key]
    osworld = any(k in raw_contract for k in _OSWORLD_CONTRACT_KEYS)
    if key == "rollout_trace_contract":
        if contract.schema_version is not None or contract.mode is not None:
            raise ContractError(
                "unsupported_contract",
                rollout_id=contract.rollout_id,
                detail="rollout_trace_contract carries schema_version/mode; the PR #2870 shape has neither",
            )
        _require(raw, "model_call_metadata", contract.rollout_id, "rollout_trace_contract")
        return "osworld" if osworld else "gym-pr2870"
    if contract.mode != "exact_trace_authority":
        raise ContractError(
            "unsupported_contract",
            rollout_id=contract.rollout_id,
            detail=f"context_compaction_contract.mode={contract.mode!r}; expected 'exact_trace_authority'",
        )
    if contract.schema_version == 3:
        _require(raw, "model_call_metadata", contract.rollout_id, "schema_version 3")
        return "osworld" if osworld else "gym-0.7.0-transport"
    if contract.schema_version == 2:
        _require(raw, "completion_evidence", contract.rollout_id, "schema_version 2")
        return "osworld" if osworld else "gym-0.7.0-full"
    raise ContractError(
        "unsupported_contract",
        rollout_id=contract.rollout_id,
        detail=f"context_compaction_contract.schema_version={contract.schema_version!r}; supported: 2 (full), 3 (transport)",
    )


def _require(raw: Mapping[str, Any], field: str, rollout_id: str, why: str) -> None:
    if not isinstance(raw.get(field), list):
        raise ContractError(
            "malformed_payload", rollout_id=rollout_id, detail=f"{field}: required by {why} but missing or not a list"
        )


# ---------------------------------------------------------------------------------------------
# media


def _declared_assets(response: GymResponse, rollout_id: str) -> dict[str, MediaAsset]:
    """`media_assets` as dataclasses, keyed as declared (the planner checks keys against ids)."""
    assets: dict[str, MediaAsset] = {}
    for key, a in sorted(response.media_assets.items()):
        _check_depth(a.source_part, f"media_assets[{key[:60]!r}].source_part", rollout_id)
        assets[key] = MediaAsset(
            media_id=a.media_id,
            content_digest=a.content_digest,
            source_part=dict(a.source_part),
            original_dimensions=tuple(a.original_dimensions) if a.original_dimensions else None,  # type: ignore[arg-type]
        )
    return assets


def _check_depth(value: object, where: str, rollout_id: str | None) -> None:
    """Untrusted values that get digested are bounded in depth first (no RecursionError later)."""
    if nesting_depth(value) > MAX_DIGEST_DEPTH:
        raise ContractError(
            "malformed_payload",
            rollout_id=rollout_id,
            detail=f"{where}: nests deeper than {MAX_DIGEST_DEPTH} levels",
        )


def _image_parts(item: object) -> list[dict[str, Any]]:
    if not isinstance(item, Mapping) or item.get("role") == "assistant":
        return []
    content = item.get("content")
    if not isinstance(content, list):
        return []
    return [dict(p) for p in content if isinstance(p, Mapping) and p.get("type") in _IMAGE_PART_TYPES]


def _bin_legacy_media(
    calls: list[ModelCall], envelope: Mapping[str, Any] | None, raw: Mapping[str, Any], rollout_id: str
) -> tuple[list[ModelCall], dict[str, MediaAsset]]:
    """Without a contract, images live in the items themselves (NeMo-RL's per-turn binning).

    Every image part of a non-assistant item — the request input first, then the output items
    in order — belongs to the prompt of the next token-bearing item and of every later one (the
    legacy path is one growing sequence). Ids follow Gym's formula on the part itself.
    """
    params = envelope.get("responses_create_params") if envelope is not None else None
    first = params.get("input") if isinstance(params, Mapping) else None
    items: list[tuple[object, bool]] = [(item, False) for item in first] if isinstance(first, list) else []
    items += [(item, True) for item in raw["output"]]
    seen: list[str] = []
    assets: dict[str, MediaAsset] = {}
    per_call: list[tuple[str, ...]] = []
    for item, is_output in items:
        if isinstance(item, Mapping) and all(item.get(f) is not None for f in TOKEN_FIELDS):
            if is_output:  # the calls are the output's token items; one echoed in the request is no call
                per_call.append(tuple(seen))
            continue
        for part in _image_parts(item):
            _check_depth(part, "an image part of the request or output items", rollout_id)
            digest = canonical_digest(part)
            media_id = "media-" + digest[:24]
            assets.setdefault(media_id, MediaAsset(media_id=media_id, content_digest=digest, source_part=part))
            seen.append(media_id)
    if not assets:
        return calls, {}
    binned = [replace(call, media_ids=per_call[i]) if i < len(per_call) else call for i, call in enumerate(calls)]
    return binned, dict(sorted(assets.items()))


# ---------------------------------------------------------------------------------------------
# calls


@dataclass(frozen=True, slots=True)
class _TokenItem:
    output_index: int
    fields: TokenFields


def _token_items(
    response: GymResponse, raw: Mapping[str, Any], rollout_id: str, violations: list[Violation]
) -> list[_TokenItem]:
    """The token-bearing output items in order; a partial token bundle is a violation."""
    items: list[_TokenItem] = []
    raw_output = raw["output"]
    for index, raw_item in enumerate(raw_output):
        present = [f for f in TOKEN_FIELDS if isinstance(raw_item, Mapping) and raw_item.get(f) is not None]
        if not present:
            continue
        if len(present) != len(TOKEN_FIELDS):
            missing = [f for f in TOKEN_FIELDS if f not in present]
            violations.append(
                Violation(
                    "missing_token_evidence",
                    len(items) + 1,
                    f"output[{index}] carries {present} but not {missing}; token metadata must be complete",
                )
            )
            continue
        try:
            fields = TokenFields.model_validate(raw_item)
        except ValidationError as exc:
            raise _malformed_item(exc, index, len(items) + 1, rollout_id) from None
        items.append(_TokenItem(index, fields))
    return items


def _malformed_item(exc: ValidationError, index: int, turn_id: int, rollout_id: str) -> ContractError:
    """Gym binds the k-th token-bearing item to call k, so the item's ordinal is its turn."""
    first = _first_error(exc)
    return ContractError(
        "malformed_payload",
        rollout_id=rollout_id,
        turn_id=turn_id,
        detail=f"response.output[{index}].{_format_loc(first['loc'])}: {first['msg']}",
    )


def _build_calls(
    token_items: list[_TokenItem],
    records: list[CallRecord] | None,
    rollout_id: str,
    flavour: str,
    violations: list[Violation],
) -> list[ModelCall]:
    if records is None and not token_items:
        violations.append(
            Violation(
                "missing_token_evidence",
                None,
                "no output item carries prompt_token_ids/generation_token_ids/generation_log_probs; "
                "nothing to train on (first prompt longer than max_model_len, or only reasoning/tool items?)",
            )
        )
    calls: list[ModelCall] = []
    chain = EvidenceDigestChain()  # each call's digest re-hashes only what it adds to the previous context
    prev_chained = False
    for item, rec in _bind_records(token_items, records, violations):
        f = item.fields
        turn_id = rec.turn_id if rec is not None else len(calls) + 1
        routes = _decode_routes(f.routed_experts, rollout_id, turn_id, violations)
        declared_digest = getattr(rec, "generation_evidence_digest", None) if rec is not None else None
        chained = False
        if isinstance(rec, ObservedCompletion):
            _check_full_record_matches(rec, f, rollout_id, violations)
        elif declared_digest is not None:
            _check_digest(declared_digest, f, turn_id, violations, chain)
            chained = True
        prompt = tuple(f.prompt_token_ids)
        if chained and prev_chained and chain.extended:
            # the chain found this prompt extends the previous call's prompt + sampled ids: share
            # those id objects (equal values), so the planner's prefix check compares identities
            prev = calls[-1]
            prompt = prev.prompt_token_ids + prev.sampled_token_ids + prompt[prev.num_tokens :]
        prev_chained = chained
        if rec is not None and rec.rollout_id != rollout_id:
            violations.append(
                Violation(
                    "rollout_id_mismatch",
                    turn_id,
                    f"call record rollout_id={rec.rollout_id!r} but the contract says {rollout_id!r}",
                )
            )
        calls.append(
            ModelCall(
                turn_id=turn_id,
                prompt_token_ids=prompt,
                sampled_token_ids=tuple(f.generation_token_ids),
                sampled_logprobs=tuple(map(float, f.generation_log_probs)),
                media_ids=tuple(rec.media_ids) if rec is not None else (),
                routed_experts=routes,
                expected_append_compatible=rec.expected_append_compatible if rec is not None else None,
                compaction_event_id=rec.compaction_event_id if rec is not None else None,
                finish_reason=rec.finish_reason if rec is not None else None,
                policy_version=f.policy_version if f.policy_version is not None else (rec.policy_version if rec else None),
                declared_digest=declared_digest,
                output_index=item.output_index,
            )
        )
    return calls


def _item_key(f: TokenFields) -> str:
    return generation_evidence_digest(f.prompt_token_ids, f.generation_token_ids, f.generation_log_probs)


def _record_key(rec: CallRecord) -> str | None:
    """What binds a record to its item: the declared digest (transport) or the digest of its own arrays (full)."""
    if isinstance(rec, ObservedCompletion):
        return generation_evidence_digest(rec.prompt_token_ids, rec.sampled_token_ids, rec.sampled_logprobs)
    return getattr(rec, "generation_evidence_digest", None)


def _bind_records(
    items: list[_TokenItem], records: list[CallRecord] | None, violations: list[Violation]
) -> list[tuple[_TokenItem, CallRecord | None]]:
    """Pair per-call records with token-bearing items.

    Gym binds them one to one in order. When the counts differ, order alone cannot say which
    call lost its evidence, so records are bound to items by their evidence digests (in order):
    a record that binds to no item names the call whose token fields were lost
    (`missing_token_evidence` at its turn); an item no record binds is `metadata_count_mismatch`
    without a turn (the turn id was in the lost record), its position named in the detail.
    """
    if records is None:
        return [(item, None) for item in items]
    if len(records) == len(items):
        return list(zip(items, records, strict=True))
    counts = f"{len(records)} per-call records but {len(items)} token-bearing output items"
    item_keys = [_item_key(it.fields) for it in items]
    pairs: list[tuple[int, int]] = []  # (item index, record index)
    next_item = 0
    for r, rec in enumerate(records):
        key = _record_key(rec)
        match = next((i for i in range(next_item, len(items)) if key is not None and item_keys[i] == key), None)
        if match is not None:
            pairs.append((match, r))
            next_item = match + 1
    if not pairs:
        violations.append(
            Violation(
                "metadata_count_mismatch",
                None,
                f"{counts}; Gym binds them one to one in order, and no record's evidence digest matches any item",
            )
        )
        return [(items[i], records[i]) for i in range(min(len(items), len(records)))]
    found: list[tuple[int, Violation]] = []
    bound_records = {r for _, r in pairs}
    already = {(v.code, v.turn_id) for v in violations}
    for r, rec in enumerate(records):
        if r in bound_records or ("missing_token_evidence", rec.turn_id) in already:
            continue
        found.append(
            (
                r,
                Violation(
                    "missing_token_evidence",
                    rec.turn_id,
                    f"turn {rec.turn_id}'s per-call record (#{r + 1}) binds to no token-bearing output item: its "
                    f"evidence digest matches none of them, so this call's token fields were lost ({counts})",
                ),
            )
        )
    bound_items = {i: r for i, r in pairs}
    for i, item in enumerate(items):
        if i in bound_items:
            continue
        turn = _implied_turn(i, pairs, records)
        implied = f"; by position it would be turn {turn}, whose record is missing" if turn is not None else ""
        found.append(
            (
                i,
                Violation(
                    "metadata_count_mismatch",
                    None,  # the turn id lived in the lost record: the evidence no longer determines it
                    f"{counts}: output[{item.output_index}] (token-bearing item #{i + 1}) carries token evidence "
                    f"that no per-call record binds by generation_evidence_digest{implied}",
                ),
            )
        )
    violations.extend(v for _, v in sorted(found, key=lambda rv: (rv[1].turn_id is None, rv[1].turn_id or 0, rv[0])))
    return [(items[i], records[r]) for i, r in pairs]


def _implied_turn(item_index: int, pairs: list[tuple[int, int]], records: list[CallRecord]) -> int | None:
    """The turn an unbound item's position implies, counting from its nearest bound neighbour."""
    before = [(i, r) for i, r in pairs if i < item_index]
    if before:
        i, r = before[-1]
        return records[r].turn_id + (item_index - i)
    i, r = pairs[0]
    turn = records[r].turn_id - (i - item_index)
    return turn if turn >= 1 else None


def _check_digest(
    declared: str, f: TokenFields, turn_id: int, violations: list[Violation], chain: EvidenceDigestChain
) -> None:
    """The metadata record binds to its output item only through this digest; Gym never re-checks it.

    `chain` computes exactly `generation_evidence_digest` (validated ids are plain ints), reusing
    the hash of the previous call's context so a rollout costs its new tokens, not its prompts.
    """
    actual = chain.digest(f.prompt_token_ids, f.generation_token_ids, f.generation_log_probs)
    if actual != declared:
        violations.append(
            Violation(
                "evidence_digest_mismatch",
                turn_id,
                f"generation_evidence_digest {declared[:16]}… does not recompute from the output item's token "
                f"arrays ({actual[:16]}…)",
            )
        )


def _check_full_record_matches(
    rec: ObservedCompletion, f: TokenFields, rollout_id: str, violations: list[Violation]
) -> None:
    """Schema 2 carries the arrays twice (record and output item); they must agree."""
    same = (
        rec.prompt_token_ids == f.prompt_token_ids
        and rec.sampled_token_ids == f.generation_token_ids
        and [float(x) for x in rec.sampled_logprobs] == [float(x) for x in f.generation_log_probs]
    )
    if not same:
        violations.append(
            Violation(
                "evidence_digest_mismatch",
                rec.turn_id,
                "completion_evidence token arrays differ from the output item's prompt_token_ids/"
                "generation_token_ids/generation_log_probs",
            )
        )


def _decode_routes(raw: object, rollout_id: str, turn_id: int, violations: list[Violation]) -> np.ndarray | None:
    if raw is None:
        return None
    if isinstance(raw, str):
        arr = _decode_route_envelope(raw, turn_id, violations)
        if arr is None:
            return None
    else:
        try:
            arr = np.asarray(raw, dtype=np.int64)
        except (ValueError, OverflowError):
            violations.append(Violation("routed_experts_shape", turn_id, "routed_experts is a ragged nested list"))
            return None
    if arr.ndim != 3:
        violations.append(
            Violation("routed_experts_shape", turn_id, f"routed_experts must be 3-D [tokens, layers, topk], got shape {list(arr.shape)}")
        )
        return None
    return arr.astype(np.int64, copy=False)


def _decode_route_envelope(text: str, turn_id: int, violations: list[Violation]) -> np.ndarray | None:
    """Decode `nrlre1:<dtype>:SxLxK:<base64>`; every dimension, the size and the byte count are checked first."""
    parts = text.split(":", 3)
    if len(parts) != 4 or parts[0] != _ROUTES_MAGIC or parts[1] not in _ROUTES_DTYPES:
        violations.append(
            Violation(
                "routed_experts_shape",
                turn_id,
                f"routed_experts string is not a '{_ROUTES_MAGIC}:<int8|int16|int32>:SxLxK:<base64>' envelope",
            )
        )
        return None
    dims = parts[2].split("x")
    if len(dims) != 3 or not all(_ROUTE_DIM.fullmatch(d) for d in dims):
        violations.append(
            Violation(
                "routed_experts_shape",
                turn_id,
                f"routed_experts envelope shape {parts[2][:48]!r} is not SxLxK with three positive decimal dimensions",
            )
        )
        return None
    shape = (int(dims[0]), int(dims[1]), int(dims[2]))
    if min(shape) < 1:
        violations.append(
            Violation("routed_experts_shape", turn_id, f"routed_experts envelope shape {list(shape)} has a zero dimension")
        )
        return None
    elements = shape[0] * shape[1] * shape[2]  # exact (Python ints never wrap)
    if elements > MAX_ROUTE_ELEMENTS:
        violations.append(
            Violation(
                "routed_experts_shape",
                turn_id,
                f"routed_experts envelope shape {list(shape)} has {elements} entries; the cap is {MAX_ROUTE_ELEMENTS}",
            )
        )
        return None
    dtype = np.dtype(_ROUTES_DTYPES[parts[1]]).newbyteorder("<")
    expected = elements * dtype.itemsize
    body = parts[3]
    padding = len(body) - len(body.rstrip("=")) if body.endswith("=") else 0
    if len(body) % 4 or padding > 2:
        violations.append(Violation("routed_experts_shape", turn_id, "routed_experts envelope payload is not valid base64"))
        return None
    size = len(body) // 4 * 3 - padding  # the decoded byte count, known before decoding
    if size != expected:
        violations.append(
            Violation(
                "routed_experts_shape",
                turn_id,
                f"routed_experts envelope shape {list(shape)} needs {expected} bytes, got {size}",
            )
        )
        return None
    try:
        data = base64.b64decode(body, validate=True)
    except (ValueError, binascii.Error):
        violations.append(Violation("routed_experts_shape", turn_id, "routed_experts envelope payload is not valid base64"))
        return None
    if len(data) != expected:
        violations.append(
            Violation(
                "routed_experts_shape",
                turn_id,
                f"routed_experts envelope shape {list(shape)} needs {expected} bytes, got {len(data)}",
            )
        )
        return None
    return np.frombuffer(data, dtype=dtype).reshape(shape).astype(np.int64)


__all__ = ["MAX_ROUTE_ELEMENTS", "TRAINER_POLICY_VERSION", "Ingested", "ingest_result", "normalize_result"]
