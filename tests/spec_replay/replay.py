"""A trainer-side replay of compactsim golden files, written only from docs/golden-spec.md.

It exists to keep the specification honest: it imports nothing from compactsim (standard
library, numpy and Pillow only; `tests/integration/test_spec_replay.py` checks that by AST), reads
a golden directory, replays every scenario's payloads step by step as the spec says, and writes
the rows dump (and metrics dump) that `compactsim verify` must accept. Section numbers (§N) refer
to the spec; where this code and the spec disagree, fix the spec's wording first.

    python -m tests.spec_replay.replay GOLDENS --rows rows.jsonl --metrics metrics.jsonl
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

TOKEN_FIELDS = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")
CONTRACT_KEYS = ("context_compaction_contract", "rollout_trace_contract")
IMAGE_PART_TYPES = ("input_image", "image", "image_url")
STD_EPSILON = 1e-6
ROUTE_DTYPES = {"int8": "<i1", "int16": "<i2", "int32": "<i4"}


class Refusal(Exception):
    """The trainer refuses the step: one error code with the rollout and turn it names (§16)."""

    def __init__(self, code: str, rollout_id: str | None, turn_id: int | None) -> None:
        super().__init__(f"{code} (rollout {rollout_id!r}, turn {turn_id})")
        self.code = code
        self.rollout_id = rollout_id
        self.turn_id = turn_id


# ------------------------------------------------------------------------------------- §13 digests


def canonical_json(value: Any) -> str:
    """Keys sorted, no spaces, UTF-8 kept; Python's float repr (§13)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def evidence_digest(prompt: Sequence[int], sampled: Sequence[int], logprobs: Sequence[float]) -> str:
    """`generation_evidence_digest` of one call's arrays (logprobs as floats)."""
    return sha256_text(canonical_json({"prompt_token_ids": list(prompt), "sampled_token_ids": list(sampled),
                                       "sampled_logprobs": [float(x) for x in logprobs]}))


def image_url(part: Mapping[str, Any]) -> str | None:
    """The data URL of an image part: `image_url` as a string or `{"url": ...}` (§7)."""
    url = part.get("image_url")
    if isinstance(url, Mapping):
        url = url.get("url")
    return url if isinstance(url, str) else None


def decode_pixels(url: str) -> np.ndarray:
    """(H, W, 3) uint8 RGB pixels of a base64 data URL (§13); ValueError when it is not one."""
    head, sep, body = url.partition(",")
    if not sep or not head.startswith("data:") or not head.endswith(";base64"):
        raise ValueError("not a base64 data URL")
    with Image.open(io.BytesIO(base64.b64decode(body, validate=True))) as im:
        return np.asarray(im.convert("RGB"), dtype=np.uint8)


def pixel_digest(rgb: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(rgb).tobytes()).hexdigest()


# --------------------------------------------------------------------------------- §3-§6 a rollout


@dataclass
class Call:
    """One model call (§4)."""

    turn_id: int
    prompt: tuple[int, ...]
    sampled: tuple[int, ...]
    logprobs: tuple[float, ...]
    media_ids: tuple[str, ...] = ()
    routes: np.ndarray | None = None
    declared_append: bool = False
    event_id: str | None = None
    version: int | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.prompt) + len(self.sampled)


@dataclass
class Rollout:
    """One logical rollout as read from its result, split into traces (§6)."""

    rollout_id: str
    has_contract: bool
    group_id: str | None
    task_id: str | None
    rollout_index: int | None
    reward: float | None
    mask_sample: bool
    calls: list[Call]
    #: media id -> the part carrying its pixels (contract: the asset's `source_part`; legacy: the part).
    parts: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    #: media id -> declared (width, height) for Gym-form ids with `original_dimensions`.
    dimensions: dict[str, tuple[int, int]] = field(default_factory=dict)
    traces: list[list[Call]] = field(default_factory=list)
    start_reasons: list[str] = field(default_factory=list)

    @property
    def group_key(self) -> str:
        """§8: group id, task id, rollout id; legacy: the first prompt's ids."""
        if self.has_contract:
            return self.group_id or self.task_id or self.rollout_id
        if not self.calls:
            return self.rollout_id
        ids = "[" + ",".join(str(i) for i in self.calls[0].prompt) + "]"
        return "prompt-" + sha256_text(ids)[:16]

    @property
    def sort_key(self) -> tuple[Any, ...]:
        index = self.rollout_index
        return (self.group_key, index is None, index if index is not None else 0, self.rollout_id)

    @property
    def num_sampled(self) -> int:
        return sum(len(c.sampled) for c in self.calls)


def _is_gym_media_id(media_id: str) -> bool:
    return (len(media_id) == 30 and media_id.startswith("media-")
            and all(ch in "0123456789abcdef" for ch in media_id[6:]))


def _int_list(value: Any, *, low: int = 0) -> bool:
    return isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) and low <= v < 2**31 for v in value)


def _float_list(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)) for v in value)


def _decode_routes(raw: Any) -> np.ndarray | None:
    """§5 A: a [tokens][layers][topk] integer array or an nrlre1 envelope; ValueError when undecodable."""
    if isinstance(raw, str):
        parts = raw.split(":", 3)
        if len(parts) != 4 or parts[0] != "nrlre1" or parts[1] not in ROUTE_DTYPES:
            raise ValueError("not an nrlre1 envelope")
        dims = parts[2].split("x")
        if len(dims) != 3 or not all(d.isdigit() for d in dims):
            raise ValueError("bad envelope shape")
        shape = tuple(int(d) for d in dims)
        data = base64.b64decode(parts[3], validate=True)
        dtype = np.dtype(ROUTE_DTYPES[parts[1]])
        if min(shape) < 1 or len(data) != shape[0] * shape[1] * shape[2] * dtype.itemsize:
            raise ValueError("envelope size does not match its shape")
        return np.frombuffer(data, dtype=dtype).reshape(shape).astype(np.int64)
    arr = np.asarray(raw)
    if arr.dtype == object or arr.ndim != 3 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise ValueError("not a 3-D integer array")
    return arr.astype(np.int64)


def read_rollout(obj: Any) -> Rollout:
    """§3-§6: read one payload line, check it, and split it into traces; `Refusal` on its first error."""
    if not isinstance(obj, Mapping):
        raise Refusal("malformed_payload", None, None)
    # §3 envelope
    if "response" in obj and "output" not in obj:
        resp = obj["response"]
        reward = obj.get("reward")
        mask_sample = bool((obj.get("instance_config") or {}).get("mask_sample", False))
        label = obj.get("trainer_policy_version")
    else:
        resp, reward, mask_sample, label = obj, None, False, None
    if isinstance(label, bool) or not isinstance(label, int):
        label = None
    if not isinstance(resp, Mapping) or not isinstance(resp.get("output"), list):
        raise Refusal("malformed_payload", None, None)
    hint = resp.get("id") if isinstance(resp.get("id"), str) else None
    # §3 contract and shape
    present = {k: resp[k] for k in CONTRACT_KEYS if resp.get(k) is not None}
    for key in present.values():
        if isinstance(key, Mapping) and isinstance(key.get("rollout_id"), str):
            hint = key["rollout_id"]
            break
    unknown = [k for k in resp if isinstance(k, str) and k.endswith("_contract") and k not in CONTRACT_KEYS
               and resp[k] is not None]
    if unknown and not present:
        raise Refusal("unsupported_contract", hint, None)
    contract: Mapping[str, Any] | None = None
    records: list[Mapping[str, Any]] | None = None
    full = False
    if present:
        cc, rt = present.get("context_compaction_contract"), present.get("rollout_trace_contract")
        for c in (cc, rt):
            if c is not None and (not isinstance(c, Mapping) or not isinstance(c.get("rollout_id"), str)):
                raise Refusal("malformed_payload", hint, None)
        if cc is not None and rt is not None and cc["rollout_id"] != rt["rollout_id"]:
            raise Refusal("rollout_id_mismatch", cc["rollout_id"], None)
        if cc is not None:
            contract = cc
            if cc.get("mode") != "exact_trace_authority" or cc.get("schema_version") not in (2, 3):
                raise Refusal("unsupported_contract", cc["rollout_id"], None)
            full = cc.get("schema_version") == 2
            field_name = "completion_evidence" if full else "model_call_metadata"
        else:
            contract = rt
            if rt.get("schema_version") is not None or rt.get("mode") is not None:
                raise Refusal("unsupported_contract", rt["rollout_id"], None)
            field_name = "model_call_metadata"
        records = resp.get(field_name)
        if not isinstance(records, list) or not all(isinstance(r, Mapping) for r in records):
            raise Refusal("malformed_payload", contract["rollout_id"], None)
    rollout_id = contract["rollout_id"] if contract is not None else (hint or "<unknown>")
    if contract is None:
        rollout_id = resp.get("id") if isinstance(resp.get("id"), str) else "<unknown>"
    if reward is not None and (isinstance(reward, bool) or not isinstance(reward, (int, float))
                               or not math.isfinite(float(reward))):
        raise Refusal("malformed_payload", rollout_id, None)
    for k, rec in enumerate(records or []):
        turn = rec.get("turn_id")
        if (not isinstance(turn, int) or isinstance(turn, bool) or turn < 1
                or not isinstance(rec.get("rollout_id"), str)
                or not isinstance(rec.get("expected_append_compatible"), bool)):
            raise Refusal("malformed_payload", rollout_id, k + 1)

    errors: list[tuple[str, int | None]] = []  # (code, turn), first one wins

    # §4 token items
    items: list[Mapping[str, Any]] = []
    for item in resp["output"]:
        have = [f for f in TOKEN_FIELDS if isinstance(item, Mapping) and item.get(f) is not None]
        if not have:
            continue
        if len(have) != len(TOKEN_FIELDS):
            errors.append(("missing_token_evidence", len(items) + 1))
            continue
        if not (_int_list(item["prompt_token_ids"]) and _int_list(item["generation_token_ids"])
                and _float_list(item["generation_log_probs"])):
            raise Refusal("malformed_payload", rollout_id, len(items) + 1)
        items.append(item)

    # §4 binding
    pairs: list[tuple[Mapping[str, Any], Mapping[str, Any] | None]]
    if records is None:
        pairs = [(item, None) for item in items]
        if not items:
            errors.append(("missing_token_evidence", None))  # §5 F
    elif len(records) == len(items):
        pairs = list(zip(items, records))
    else:
        item_keys = [evidence_digest(i["prompt_token_ids"], i["generation_token_ids"], i["generation_log_probs"])
                     for i in items]

        def record_key(rec: Mapping[str, Any]) -> str | None:
            if full:
                return evidence_digest(rec.get("prompt_token_ids") or [], rec.get("sampled_token_ids") or [],
                                       rec.get("sampled_logprobs") or [])
            value = rec.get("generation_evidence_digest")
            return value if isinstance(value, str) else None

        bound: list[tuple[int, int]] = []
        next_item = 0
        for r, rec in enumerate(records):
            key = record_key(rec)
            match = next((i for i in range(next_item, len(items)) if key is not None and item_keys[i] == key), None)
            if match is not None:
                bound.append((match, r))
                next_item = match + 1
        if not bound:
            errors.append(("metadata_count_mismatch", None))
            pairs = [(items[i], records[i]) for i in range(min(len(items), len(records)))]
        else:
            bound_records = {r for _, r in bound}
            for r, rec in enumerate(records):
                if r not in bound_records and ("missing_token_evidence", rec["turn_id"]) not in errors:
                    errors.append(("missing_token_evidence", rec["turn_id"]))
            bound_items = {i for i, _ in bound}
            errors.extend(("metadata_count_mismatch", None) for i in range(len(items)) if i not in bound_items)
            pairs = [(items[i], records[r]) for i, r in bound]

    # §4 calls, §5 A per bound call
    calls: list[Call] = []
    for ordinal, (item, rec) in enumerate(pairs, start=1):
        turn = rec["turn_id"] if rec is not None else ordinal
        routes = None
        if item.get("routed_experts") is not None:
            try:
                routes = _decode_routes(item["routed_experts"])
            except (ValueError, TypeError, OverflowError):
                errors.append(("routed_experts_shape", turn))
        if rec is not None:
            if full:
                same = (rec.get("prompt_token_ids") == item["prompt_token_ids"]
                        and rec.get("sampled_token_ids") == item["generation_token_ids"]
                        and [float(x) for x in rec.get("sampled_logprobs") or []]
                        == [float(x) for x in item["generation_log_probs"]])
                if not same:
                    errors.append(("evidence_digest_mismatch", turn))
            elif rec.get("generation_evidence_digest") is not None:
                if rec["generation_evidence_digest"] != evidence_digest(
                        item["prompt_token_ids"], item["generation_token_ids"], item["generation_log_probs"]):
                    errors.append(("evidence_digest_mismatch", turn))
            if rec["rollout_id"] != rollout_id:
                errors.append(("rollout_id_mismatch", turn))
        version = item.get("policy_version")
        if version is None and rec is not None:
            version = rec.get("policy_version")
        if version is None:
            version = label
        calls.append(Call(
            turn_id=turn,
            prompt=tuple(item["prompt_token_ids"]),
            sampled=tuple(item["generation_token_ids"]),
            logprobs=tuple(float(x) for x in item["generation_log_probs"]),
            media_ids=tuple(rec.get("media_ids") or ()) if rec is not None else (),
            routes=routes,
            declared_append=bool(rec.get("expected_append_compatible")) if rec is not None else False,
            event_id=rec.get("compaction_event_id") if rec is not None else None,
            version=version,
        ))

    rollout = Rollout(
        rollout_id=rollout_id, has_contract=contract is not None,
        group_id=contract.get("group_id") if contract is not None else None,
        task_id=contract.get("task_id") if contract is not None else None,
        rollout_index=contract.get("rollout_index") if contract is not None else None,
        reward=None if reward is None else float(reward), mask_sample=mask_sample, calls=calls,
    )
    assets: Mapping[str, Any] = resp.get("media_assets") or {}
    events = [e for e in resp.get("boundary_events") or [] if isinstance(e, Mapping)]
    if contract is not None:
        for key, asset in assets.items():
            if isinstance(asset, Mapping) and isinstance(asset.get("source_part"), Mapping):
                rollout.parts[key] = asset["source_part"]
                dims = asset.get("original_dimensions")
                if isinstance(dims, list) and len(dims) == 2:
                    rollout.dimensions[key] = (int(dims[0]), int(dims[1]))
    else:
        _bin_legacy_media(rollout, obj, resp, pairs)

    _check_calls(rollout, assets, events, errors)
    if contract is not None:
        _check_assets(rollout, assets, errors)
    _segment(rollout, events, errors)
    if contract is not None:
        by_turn = {c.turn_id: c for c in calls}
        for e in events:
            call = by_turn.get(e.get("applies_to_step"))
            if call is None or call.event_id != e.get("event_id"):
                errors.append(("orphan_compaction_event", e.get("applies_to_step")))
    if errors:
        code, turn = errors[0]
        raise Refusal(code, rollout_id, turn)
    return rollout


def _bin_legacy_media(rollout: Rollout, obj: Mapping[str, Any], resp: Mapping[str, Any],
                      pairs: Sequence[tuple[Mapping[str, Any], Any]]) -> None:
    """§4 legacy media binning: image parts of request input then output, a running list per call."""
    params = obj.get("responses_create_params") if obj is not resp else None
    first = params.get("input") if isinstance(params, Mapping) else None
    walk: list[Any] = (list(first) if isinstance(first, list) else []) + list(resp["output"])
    running: list[str] = []
    shown: list[tuple[str, ...]] = []
    for item in walk:
        if isinstance(item, Mapping) and all(item.get(f) is not None for f in TOKEN_FIELDS):
            shown.append(tuple(running))
            continue
        if not isinstance(item, Mapping) or item.get("role") == "assistant" or not isinstance(item.get("content"), list):
            continue
        for part in item["content"]:
            if isinstance(part, Mapping) and part.get("type") in IMAGE_PART_TYPES:
                media_id = "media-" + sha256_text(canonical_json(part))[:24]
                rollout.parts.setdefault(media_id, part)
                running.append(media_id)
    for call, media in zip(rollout.calls, shown):
        call.media_ids = media


def _check_calls(rollout: Rollout, assets: Mapping[str, Any], events: Sequence[Mapping[str, Any]],
                 errors: list[tuple[str, int | None]]) -> None:
    """§5 B, for every call in order."""
    by_id = {e.get("event_id"): e for e in events}
    layout: tuple[int, int] | None = None
    for position, call in enumerate(rollout.calls, start=1):
        turn = call.turn_id
        if turn != position:
            errors.append(("turn_order", turn))
        if len(call.sampled) != len(call.logprobs):
            errors.append(("token_logprob_length_mismatch", turn))
        if any(lp > 0.0 for lp in call.logprobs):
            errors.append(("logprob_out_of_range", turn))
        if rollout.has_contract and any(m not in assets for m in call.media_ids):
            errors.append(("unknown_media_asset", turn))
        r = call.routes
        if r is not None:
            if r.shape[1] < 1 or r.shape[2] < 1:
                errors.append(("routed_experts_shape", turn))
            elif r.size and int(r.min()) < -1:
                errors.append(("routed_expert_id_out_of_range", turn))
            elif not call.num_tokens <= r.shape[0] <= call.num_tokens + 1:
                errors.append(("routed_experts_shape", turn))
            else:
                neg = r < 0
                if bool((neg.any(axis=2) & ~neg.all(axis=2)).any()):
                    errors.append(("routed_experts_shape", turn))
                this = (int(r.shape[1]), int(r.shape[2]))
                if layout is not None and this != layout:
                    errors.append(("routed_experts_shape", turn))
                elif layout is None:
                    layout = this
        if call.event_id is not None:
            event = by_id.get(call.event_id)
            if event is None or event.get("applies_to_step") != turn:
                errors.append(("orphan_compaction_event", turn))


def _check_assets(rollout: Rollout, assets: Mapping[str, Any], errors: list[tuple[str, int | None]]) -> None:
    """§5 C: each asset filed under its own id, and a Gym-form id still matches its content."""
    first_use: dict[str, int] = {}
    for call in rollout.calls:
        for media_id in call.media_ids:
            first_use.setdefault(media_id, call.turn_id)
    for key in sorted(assets):
        asset = assets[key]
        turn = first_use.get(key)
        if not isinstance(asset, Mapping) or asset.get("media_id") != key:
            errors.append(("media_asset_key_mismatch", turn))
            continue
        if not _is_gym_media_id(key) or not isinstance(asset.get("source_part"), Mapping):
            continue
        digest = sha256_text(canonical_json(asset["source_part"]))
        declared = asset.get("content_digest")
        if (declared is not None and declared != digest) or key != "media-" + digest[:24]:
            errors.append(("media_digest_mismatch", turn))


def _extends(prev: Call, call: Call) -> bool:
    context = prev.prompt + prev.sampled
    return call.prompt[: len(context)] == context


def _segment(rollout: Rollout, events: Sequence[Mapping[str, Any]], errors: list[tuple[str, int | None]]) -> None:
    """§6: traces, with every declaration checked against the tokens both ways."""
    calls = rollout.calls
    if not calls:
        return
    applied = {e.get("applies_to_step") for e in events}
    rollout.traces = [[calls[0]]]
    rollout.start_reasons = ["rollout_start"]
    first = calls[0]
    if rollout.has_contract:
        if first.declared_append:
            errors.append(("append_declaration_mismatch", first.turn_id))
        if first.event_id is not None or first.turn_id in applied:
            errors.append(("boundary_without_rewrite", first.turn_id))
    for prev, call in zip(calls, calls[1:]):
        extends = _extends(prev, call)
        if not rollout.has_contract:
            if not extends:
                errors.append(("undeclared_discontinuity", call.turn_id))
            rollout.traces[-1].append(call)
            continue
        boundary = call.event_id is not None or call.turn_id in applied
        if extends:
            if boundary:
                errors.append(("boundary_without_rewrite", call.turn_id))
            elif not call.declared_append:
                errors.append(("append_declaration_mismatch", call.turn_id))
            elif call.media_ids[: len(prev.media_ids)] != prev.media_ids:
                errors.append(("media_continuity", call.turn_id))
            rollout.traces[-1].append(call)
        elif call.declared_append:
            errors.append(("append_declaration_mismatch", call.turn_id))
        elif boundary:
            rollout.traces.append([call])
            rollout.start_reasons.append("declared_boundary")
        else:
            errors.append(("undeclared_discontinuity", call.turn_id))


# ------------------------------------------------------------------------------ §7-§12 the batch


@dataclass(frozen=True)
class Trainer:
    """The `expectation.json` → `trainer` fields the replay reads (§1)."""

    num_generations_per_prompt: int | None
    leave_one_out: bool
    normalize: bool
    clip_low: float | None
    clip_high: float | None
    dp_size: int
    micro_batch_size: int
    async_mode: bool
    importance_sampling_correction: bool
    router_replay: bool
    max_total_sequence_length: int
    make_sequence_length_divisible_by: int

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> Trainer:
        return cls(**{name: data[name] for name in cls.__dataclass_fields__})


def group_advantages(rewards: Sequence[float], t: Trainer, *, clip: bool = True) -> list[float]:
    """§9: leave-one-out baseline, sample std (n−1) of the same set, epsilon only where std > 0, then clip
    (`clip=False`: the advantages `advantages/sum` adds up, §14)."""
    n = len(rewards)
    out: list[float] = []
    for i, r in enumerate(rewards):
        if n <= 1:
            a = 0.0
        else:
            others = [x for j, x in enumerate(rewards) if j != i] if t.leave_one_out else list(rewards)
            m = len(others)
            b = math.fsum(others) / m
            s = 0.0
            if m > 1 and min(others) != max(others):
                s = math.sqrt(math.fsum((x - b) ** 2 for x in others) / (m - 1))
            a = r - b
            if t.normalize and s > 0:
                a = a / (s + STD_EPSILON)
        if clip and t.clip_low is not None:
            a = max(a, t.clip_low)
        if clip and t.clip_high is not None:
            a = min(a, t.clip_high)
        out.append(a)
    return out


def check_batch(received: Sequence[Rollout], t: Trainer) -> list[Rollout]:
    """§7 checks 1-5 in order; the unique rollouts in canonical order (§8)."""
    if not received:
        raise Refusal("no_eligible_tokens", None, None)
    counts = Counter(r.rollout_id for r in received)
    dups = sorted(rid for rid, n in counts.items() if n > 1)
    if dups:
        raise Refusal("duplicate_logical_rollout_id", dups[0], None)
    ordered = sorted(received, key=lambda r: r.sort_key)
    groups: dict[str, list[Rollout]] = {}
    for r in ordered:
        groups.setdefault(r.group_key, []).append(r)
    if t.num_generations_per_prompt is not None:
        for key in sorted(groups):
            ids = sorted(r.rollout_id for r in groups[key])
            if len(ids) < t.num_generations_per_prompt:
                raise Refusal("incomplete_group", ids[0], None)
            if len(ids) > t.num_generations_per_prompt:
                raise Refusal("oversized_group", ids[0], None)
    versions: dict[str, set[int | None]] = {}
    for r in ordered:
        own = {c.version for c in r.calls}
        if len(own) > 1:
            raise Refusal("mixed_policy_versions", r.rollout_id, None)
        versions.setdefault(r.group_key, set()).update(own)
    for key in sorted(versions):
        if len(versions[key]) > 1:
            raise Refusal("mixed_policy_versions", None, None)
    if len(set().union(*versions.values())) > 1 and not (t.async_mode and t.importance_sampling_correction):
        raise Refusal("mixed_policy_versions", None, None)
    layout: tuple[int, int] | None = None
    for r in ordered:
        if r.num_sampled == 0:
            raise Refusal("no_eligible_tokens", r.rollout_id, None)
        for c in r.calls:
            if c.routes is None:
                continue
            this = (int(c.routes.shape[1]), int(c.routes.shape[2]))
            if layout is not None and this != layout:
                raise Refusal("inconsistent_routed_expert_shapes", r.rollout_id, None)
            layout = this
    return ordered


def batch_route_layout(ordered: Sequence[Rollout]) -> tuple[int, int] | None:
    """§7.5: the batch's one `[layers, topk]` (that of its first call with routes), or None without routes."""
    for r in ordered:
        for c in r.calls:
            if c.routes is not None:
                return int(c.routes.shape[1]), int(c.routes.shape[2])
    return None


def _route_row(call: Call, t: int, layout: tuple[int, int]) -> np.ndarray:
    """§11 rule 1: row t of a call's routes, all −1 when it recorded none; t < prompt + sampled, so the one
    surplus row (§5 B.5) is never read."""
    if call.routes is None:
        return np.full(layout, -1, dtype=np.int64)
    return call.routes[t]


def replay_routes(trace: Sequence[Call], final_trace: bool, layout: tuple[int, int]) -> list[Any]:
    """§11 rules 1-3: the row's replayed routes, one `[layers][topk]` list per token of its `input_ids`.

    Calls extend each other (§6), so their spans nest: each position is owned by the first call reaching past
    it (rule 1), and a call's final token takes the row of the call right after it in the trace (rule 2) —
    for a call that adds no token, that is the owner's next call, as rule 2 reads literally. −1 rows of a call
    without routes take the batch's `[layers, topk]` (§7.5)."""
    out = np.full((trace[-1].num_tokens, *layout), -1, dtype=np.int64)
    start = 0
    for i, call in enumerate(trace):
        end = call.num_tokens  # rule 1: positions [start, end) are owned by this call
        for t in range(start, end):
            out[t] = _route_row(call, t, layout)
        if i + 1 < len(trace) and end > start:  # rule 2: its final token's row is a placeholder
            out[end - 1] = _route_row(trace[i + 1], end - 1, layout)
        start = max(start, end)
    if not final_trace:  # rule 3: the boundary sentinel
        out[-1] = -1
    return out.tolist()


def build_rows(scenario: str, step: int, ordered: Sequence[Rollout], t: Trainer,
               pixel_cache: dict[str, str]) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """§8-§12 rows (real rows in canonical order, then padding) and §14 metrics; §7 checks 6-7 on the way."""
    groups: dict[str, list[int]] = {}
    for k, r in enumerate(ordered):
        groups.setdefault(r.group_key, []).append(k)
    advantage = [0.0] * len(ordered)
    unclipped = [0.0] * len(ordered)
    for members in groups.values():
        rewards = []
        for k in members:
            if ordered[k].reward is None:
                raise Refusal("malformed_payload", ordered[k].rollout_id, None)
            rewards.append(float(ordered[k].reward))  # type: ignore[arg-type]
        for k, a in zip(members, group_advantages(rewards, t)):
            advantage[k] = a
        for k, a in zip(members, group_advantages(rewards, t, clip=False)):
            unclipped[k] = a
    layout = batch_route_layout(ordered)
    has_routes = layout is not None
    rows: list[dict[str, Any]] = []
    for parent, r in enumerate(ordered):
        for k, trace in enumerate(r.traces):
            last = trace[-1]
            ids = list(last.prompt + last.sampled)
            spans: list[list[int]] = []
            logprobs = [0.0] * len(ids)
            advantages = [0.0] * len(ids)
            for c in trace:
                start = len(c.prompt)
                for j, lp in enumerate(c.logprobs):
                    logprobs[start + j] = lp
                    advantages[start + j] = advantage[parent]
                if c.sampled:
                    spans.append([start, start + len(c.sampled)])
            digests = []
            for media_id in last.media_ids:
                digests.append(_pixel_digest(r, media_id, last.turn_id, pixel_cache))
            final = k == len(r.traces) - 1
            row: dict[str, Any] = {
                "scenario": scenario, "step": step, "physical_trace_id": f"{r.rollout_id}/trace-{k}",
                "logical_rollout_id": r.rollout_id, "parent_index": parent, "trace_index": k,
                "input_ids": ids, "mask_spans": spans, "generation_logprobs": logprobs, "advantages": advantages,
                "rollout_advantage": advantage[parent], "sample_mask": 0.0 if r.mask_sample else 1.0,
                "generation_policy_version": last.version, "media_ids": list(last.media_ids),
                "pixel_digests": digests,
                "routed_experts_sentinel_positions": [len(ids) - 1] if has_routes and not final else [],
            }
            if layout is not None:
                row["routed_experts"] = replay_routes(trace, final, layout)
            rows.append(row)
    if t.router_replay and not has_routes:
        raise Refusal("missing_routed_experts", None, None)
    if t.router_replay:  # §7.6, second sentence: the first route-less call in canonical order
        for r in ordered:
            for c in r.calls:
                if c.routes is None:
                    raise Refusal("missing_routed_experts", r.rollout_id, c.turn_id)
    for r in ordered:
        if any(trace[-1].num_tokens > t.max_total_sequence_length for trace in r.traces):
            raise Refusal("sequence_too_long", r.rollout_id, None)
    multiple = t.dp_size * t.micro_batch_size
    padding = (-len(rows)) % multiple
    real = list(rows)
    rows += [{"scenario": scenario, "step": step, "physical_trace_id": None, "logical_rollout_id": None,
              "parent_index": -1, "input_ids": [], "token_mask": [], "generation_logprobs": [], "advantages": [],
              "sample_mask": 0.0} for _ in range(padding)]
    return rows, batch_metrics(ordered, advantage, real, padding, t, unclipped)


def _pixel_digest(r: Rollout, media_id: str, turn: int, cache: dict[str, str]) -> str:
    """§13 pixel digest of one image of a row, checking decode and declared dimensions (§7)."""
    part = r.parts.get(media_id)
    url = image_url(part) if part is not None else None
    if url is None:
        raise Refusal("media_decode", r.rollout_id, turn)
    if url not in cache:
        try:
            rgb = decode_pixels(url)
        except (ValueError, OSError):
            raise Refusal("media_decode", r.rollout_id, turn) from None
        declared = r.dimensions.get(media_id)
        if declared is not None and _is_gym_media_id(media_id) and declared != (rgb.shape[1], rgb.shape[0]):
            raise Refusal("media_dimensions_mismatch", r.rollout_id, turn)
        cache[url] = pixel_digest(rgb)
    return cache[url]


def batch_metrics(ordered: Sequence[Rollout], advantage: Sequence[float], rows: Sequence[Mapping[str, Any]],
                  padding: int, t: Trainer, unclipped: Sequence[float]) -> dict[str, float]:
    """§14, every exact batch metric of a training step (`unclipped`: each rollout's advantage before the clip)."""
    n_rows = len(rows)
    n = len(ordered)
    per_rollout = Counter(row["parent_index"] for row in rows)
    trained = [(advantage[k], r.num_sampled) for k, r in enumerate(ordered) if r.num_sampled > 0]
    tokens = sum(m for _, m in trained)
    longest = max((len(row["input_ids"]) for row in rows), default=0)
    divisor = t.make_sequence_length_divisible_by
    s_pad = -(-longest // divisor) * divisor
    return {
        "physical_trace_training/num_physical_rows": n_rows,
        "physical_trace_training/physical_traces": n_rows,
        "physical_trace_training/num_padding_rows": padding,
        "physical_trace_training/padding_rows": padding,
        "physical_trace_training/physical_rows": n_rows + padding,
        "physical_trace_training/num_logical_rollouts": n,
        "physical_trace_training/logical_rollouts": n,
        "physical_trace_training/scheduler_step_increment": n,
        "physical_trace_training/num_split_rollouts": sum(1 for v in per_rollout.values() if v > 1),
        "physical_trace_training/rows_per_rollout_max": max(per_rollout.values(), default=0),
        "physical_trace_training/logical_advantages/mean": math.fsum(advantage) / n if n else 0.0,
        "physical_trace_training/logical_advantages/sum": math.fsum(advantage),
        "physical_trace_training/eligible_action_tokens": sum(r.num_sampled for r in ordered),
        "physical_trace_training/declared_boundaries": sum(r.start_reasons.count("declared_boundary")
                                                           for r in ordered),
        "physical_trace_training/inferred_discontinuities": 0,
        "physical_trace_training/optimizer_steps": 1,
        "advantages/sum": s_pad * math.fsum(unclipped[row["parent_index"]] for row in rows),
        "advantages/mean": math.fsum(a * m for a, m in trained) / tokens if tokens else 0.0,
        "advantages/min": min((a for a, _ in trained), default=0.0),
        "advantages/max": max((a for a, _ in trained), default=0.0),
        "num_mask_sample_filtered": sum(1 for r in ordered if r.mask_sample),
        "total_num_tokens": sum(len(row["input_ids"]) for row in rows),
    }


# --------------------------------------------------------------------------------- §2 the driver


def _lines(path: Path) -> list[Any]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def replay_step(scenario: str, step: int, results: Sequence[Any], t: Trainer,
                pixel_cache: dict[str, str]) -> tuple[list[dict[str, Any]], dict[str, float] | None]:
    """One step (§2): rows and metrics, or one error line and None."""
    try:
        received = [read_rollout(obj) for obj in results]
        ordered = check_batch(received, t)
        return build_rows(scenario, step, ordered, t, pixel_cache)
    except Refusal as refusal:
        return [{"scenario": scenario, "step": step,
                 "error": {"code": refusal.code, "rollout_id": refusal.rollout_id, "turn_id": refusal.turn_id}}], None


def replay_golden(golden: Path, scenarios: Iterable[str] | None = None
                  ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every scenario (or the named ones) of a golden directory: (rows-dump lines, metrics-dump lines)."""
    manifest = json.loads((golden / "manifest.json").read_text(encoding="utf-8"))
    wanted = None if scenarios is None else set(scenarios)
    rows: list[dict[str, Any]] = []
    metrics: list[dict[str, Any]] = []
    for entry in manifest["scenarios"]:
        if wanted is not None and entry["name"] not in wanted:
            continue
        directory = golden / entry["directory"]
        expectation = json.loads((directory / "expectation.json").read_text(encoding="utf-8"))
        trainer = Trainer.of(expectation["trainer"])
        cache: dict[str, str] = {}
        for step in expectation["steps"]:
            results = [obj for group in step["payloads"] for obj in _lines(directory / group["file"])]
            lines, step_metrics = replay_step(entry["name"], step["step"], results, trainer, cache)
            rows += lines
            if step_metrics is None:
                break
            metrics.append({"scenario": entry["name"], "step": step["step"], "metrics": step_metrics})
    return rows, metrics


def write_lines(path: Path, lines: Sequence[Mapping[str, Any]]) -> None:
    path.write_text("".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines), encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Replay compactsim golden files from the spec alone.")
    parser.add_argument("golden", type=Path)
    parser.add_argument("--rows", type=Path, required=True)
    parser.add_argument("--metrics", type=Path)
    parser.add_argument("--scenario", action="append")
    args = parser.parse_args(argv)
    rows, metrics = replay_golden(args.golden, args.scenario)
    write_lines(args.rows, rows)
    if args.metrics is not None:
        write_lines(args.metrics, metrics)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
