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
            return next(key for key in (self.group_id, self.task_id, self.rollout_id) if key is not None)
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


# ------------------------------------------------------------------------ §3 field types, as data

INT32_END = 2**31
FLOAT32_MAX = 3.4028234663852886e38
MAX_NESTING = 64


def _int_in(low: int, end: int) -> Any:
    """A checker: an integer (never a boolean) with low ≤ n < end."""
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and low <= v < end


def _string(v: Any) -> bool:
    return isinstance(v, str)


def _boolean(v: Any) -> bool:
    return isinstance(v, bool)


def _object(v: Any) -> bool:
    return isinstance(v, Mapping)


_int32 = _int_in(0, INT32_END)


def _strings(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _token_ids(v: Any) -> bool:
    return isinstance(v, list) and all(_int32(x) for x in v)


def _number(float_limit: float) -> Any:
    """A checker (§3): a finite float with |x| ≤ `float_limit`, or an integer with |n| ≤ 2⁵³ (booleans are not numbers)."""
    def check(v: Any) -> bool:
        if isinstance(v, bool):
            return False
        if isinstance(v, int):
            return abs(v) <= 2**53
        return isinstance(v, float) and math.isfinite(v) and abs(v) <= float_limit
    return check


#: A logprob's float fits float32; a reward's is bounded like its integers.
_logprob, _reward = _number(FLOAT32_MAX), _number(2.0**53)


def _logprobs(v: Any) -> bool:
    return isinstance(v, list) and all(_logprob(x) for x in v)


def _routes(v: Any) -> bool:
    """An `nrlre1:` string, or a list of lists of lists of integers −1 ≤ n < 2³¹ (shape checked in §5)."""
    ids = _int_in(-1, INT32_END)
    return isinstance(v, str) or (isinstance(v, list) and all(
        isinstance(rows, list) and all(isinstance(row, list) and all(ids(x) for x in row) for row in rows)
        for rows in v))


def _dimensions(v: Any) -> bool:
    return isinstance(v, list) and len(v) == 2 and all(_int_in(1, INT32_END)(x) for x in v)


def _generation_contract(v: Any) -> bool:
    return isinstance(v, Mapping) and _fields_ok(v, GENERATION_CONTRACT_FIELDS)


#: (field, checker, required), in the walk order of §3 "Order of §3's errors"; an optional null is absent, except
#: for the fields §3 lists as "absent or a value, never null" (`NO_NULL`).
Fields = tuple[tuple[str, Any, bool | str], ...]
NO_NULL = "no-null"
GENERATION_CONTRACT_FIELDS: Fields = (
    ("schema_version", lambda v: v == 1 and _int32(v), NO_NULL),
    *((name, _string, True) for name in (
        "model_contract_id", "tokenizer_contract_id", "template_contract_id", "sampling_contract_id",
        "processor_contract_id", "compaction_policy_id", "generation_contract_id")),
    ("loss_normalization", lambda v: v == "global_action_token_mean", NO_NULL),
    ("training_eligible", _boolean, NO_NULL),
    ("incomplete_reasons", _strings, NO_NULL),
)
CONTRACT_FIELDS: Fields = (
    ("schema_version", _int32, False), ("mode", _string, False), ("rollout_id", _string, True),
    ("group_id", _string, False), ("task_id", _string, False), ("rollout_index", _int32, False),
    ("attempt_index", _int32, False), ("generation_contract", _generation_contract, False),
)
RECORD_FIELDS: Fields = (
    ("rollout_id", _string, True), ("turn_id", _int_in(1, INT32_END), True), ("context_epoch", _int32, NO_NULL),
    ("segment_index", _int32, NO_NULL), ("expected_append_compatible", _boolean, True),
    ("compaction_event_id", _string, False), ("finish_reason", _string, False), ("media_ids", _strings, NO_NULL),
    ("policy_version", _int32, False),
)
TRANSPORT_RECORD_FIELDS: Fields = (("generation_evidence_digest", _string, True),)
FULL_RECORD_FIELDS: Fields = (
    ("prompt_token_ids", _token_ids, True), ("sampled_token_ids", _token_ids, True),
    ("sampled_logprobs", _logprobs, True),
)
TOKEN_ITEM_FIELDS: Fields = (
    ("prompt_token_ids", _token_ids, True), ("generation_token_ids", _token_ids, True),
    ("generation_log_probs", _logprobs, True), ("routed_experts", _routes, False), ("policy_version", _int32, False),
)
EVENT_FIELDS: Fields = (
    ("event_id", _string, True), ("trigger_after_step", _int_in(-INT32_END + 1, INT32_END), True),
    ("applies_to_step", _int_in(-INT32_END + 1, INT32_END), True), ("reason", _string, NO_NULL),
    ("retained_media_count", _int32, False), ("removed_media_count", _int32, False),
)
ASSET_FIELDS: Fields = (
    ("media_id", _string, True), ("content_digest", _string, False), ("source_part", _object, True),
    ("original_dimensions", _dimensions, False), ("color_mode", _string, False), ("source_format", _string, False),
)
RUN_FIELDS: Fields = (
    ("reward", _reward, False),
    ("instance_config", lambda v: isinstance(v, Mapping) and _fields_ok(v, (("mask_sample", _boolean, NO_NULL),)), False),
    ("trainer_policy_version", _int32, False),
)


def _fields_ok(obj: Mapping[str, Any], fields: Fields) -> bool:
    """Every field of the table present when required and of its type when not null."""
    for name, check, required in fields:
        value = obj.get(name)
        if value is None:
            if required is True or (required == NO_NULL and name in obj):
                return False
        elif not check(value):
            return False
    return True


def _entries_ok(resp: Mapping[str, Any], key: str, kind: type, fields: Fields) -> bool:
    """`resp[key]` absent, or a `kind` (an object: its values; a list: its elements) of objects of `fields`;
    §3 lists `media_assets` and `boundary_events` as "absent or a value, never null"."""
    if key not in resp:
        return True
    value = resp[key]
    if not isinstance(value, kind):
        return False  # null included
    entries = value.values() if isinstance(value, Mapping) else value
    return all(isinstance(entry, Mapping) and _fields_ok(entry, fields) for entry in entries)


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether objects/lists nest more than `limit` levels (the value itself is level 1), without recursion."""
    stack = [(value, 1)]
    while stack:
        node, level = stack.pop()
        children = node.values() if isinstance(node, Mapping) else node if isinstance(node, list) else None
        if children is None:
            continue
        if level > limit:
            return True
        stack.extend((child, level + 1) for child in children)
    return False


def _decode_routes(raw: Any) -> np.ndarray:
    """§5 A: a rectangular [tokens][layers][topk] array or an nrlre1 envelope; ValueError when undecodable."""
    if isinstance(raw, str):
        parts = raw.split(":", 3)
        if len(parts) != 4 or parts[0] != "nrlre1" or parts[1] not in ROUTE_DTYPES:
            raise ValueError("not an nrlre1 envelope")
        dims = parts[2].split("x")
        if len(dims) != 3 or not all(d.isascii() and d.isdigit() for d in dims):
            raise ValueError("bad envelope shape")
        shape = tuple(int(d) for d in dims)
        data = base64.b64decode(parts[3], validate=True)
        dtype = np.dtype(ROUTE_DTYPES[parts[1]])
        if min(shape) < 1 or len(data) != shape[0] * shape[1] * shape[2] * dtype.itemsize:
            raise ValueError("envelope with a zero dimension, or a size that does not match its shape")
        return np.frombuffer(data, dtype=dtype).reshape(shape).astype(np.int64)
    # §3 made it a list of lists of lists of integers: decodable when rectangular
    if not raw or not raw[0]:
        raise ValueError("fewer than three dimensions")
    layers, topk = len(raw[0]), len(raw[0][0])
    if any(len(rows) != layers or any(len(row) != topk for row in rows) for rows in raw):
        raise ValueError("ragged")
    return np.asarray(raw, dtype=np.int64).reshape(len(raw), layers, topk)


# ---------------------------------------------------------------------------- §3-§5 reading a result


def _rollout_name(resp: Mapping[str, Any]) -> str | None:
    """§16: the contract's `rollout_id` when readable, else the response `id`."""
    for key in CONTRACT_KEYS:
        contract = resp.get(key)
        if isinstance(contract, Mapping) and isinstance(contract.get("rollout_id"), str):
            return contract["rollout_id"]
    return resp.get("id") if isinstance(resp.get("id"), str) else None


def _check_field_types(run: Mapping[str, Any] | None, resp: Mapping[str, Any], rollout_id: str | None) -> None:
    """§3 order 2: the field-type table (token items aside), walked in the order the spec states."""
    def bad(turn: int | None = None) -> Refusal:
        return Refusal("malformed_payload", rollout_id, turn)

    output = resp.get("output")
    if not isinstance(output, list):
        raise bad()
    for item in output:
        if not isinstance(item, Mapping) or not isinstance(item.get("type"), str):
            raise bad()
    if not _entries_ok(resp, "media_assets", Mapping, ASSET_FIELDS):
        raise bad()
    # "the record lists" of the response row and "record (both lists)": each list present is typed, its
    # records as transport records (`model_call_metadata`) or full records (`completion_evidence`)
    for key, extra in (("model_call_metadata", TRANSPORT_RECORD_FIELDS), ("completion_evidence", FULL_RECORD_FIELDS)):
        records = resp.get(key)
        if records is None:
            continue  # missing: §3 structural error 4 when the shape reads it
        if not isinstance(records, list):
            raise bad()
        for position, record in enumerate(records, start=1):
            if not isinstance(record, Mapping) or not _fields_ok(record, RECORD_FIELDS + extra):
                raise bad(position)
    if not _entries_ok(resp, "boundary_events", list, EVENT_FIELDS):
        raise bad()
    for key in CONTRACT_KEYS:
        contract = resp.get(key)
        if contract is not None and (not isinstance(contract, Mapping) or not _fields_ok(contract, CONTRACT_FIELDS)):
            raise bad()
    if run is not None and not _fields_ok(run, RUN_FIELDS):
        raise bad()


def _read_contract(resp: Mapping[str, Any], rollout_id: str | None
                   ) -> tuple[Mapping[str, Any] | None, list[Mapping[str, Any]] | None, bool]:
    """§3 order 3, structural errors 1-4: (contract, its records, full envelope?); (None, None, False) for legacy."""
    cc, rt = resp.get("context_compaction_contract"), resp.get("rollout_trace_contract")
    if cc is None and rt is None:
        if any(isinstance(k, str) and k.endswith("_contract") and v is not None for k, v in resp.items()):
            raise Refusal("unsupported_contract", rollout_id, None)
        return None, None, False
    if cc is not None and rt is not None and cc["rollout_id"] != rt["rollout_id"]:
        raise Refusal("rollout_id_mismatch", cc["rollout_id"], None)
    if cc is None and rt is not None and (rt.get("schema_version") is not None or rt.get("mode") is not None):
        raise Refusal("unsupported_contract", rt["rollout_id"], None)
    if cc is not None and (cc.get("mode") != "exact_trace_authority" or cc.get("schema_version") not in (2, 3)):
        raise Refusal("unsupported_contract", cc["rollout_id"], None)
    contract = cc if cc is not None else rt
    full = cc is not None and cc["schema_version"] == 2
    records = resp.get("completion_evidence" if full else "model_call_metadata")
    if not isinstance(records, list):
        raise Refusal("malformed_payload", contract["rollout_id"], None)
    return contract, records, full


def _image_parts(run: Mapping[str, Any] | None, resp: Mapping[str, Any]) -> list[Mapping[str, Any] | None]:
    """§4 legacy binning walk: request input items then output items; an image part per image, None per call."""
    params = run.get("responses_create_params") if run is not None else None
    first = params.get("input") if isinstance(params, Mapping) else None
    walk = [(item, False) for item in (first if isinstance(first, list) else [])]
    walk += [(item, True) for item in resp["output"]]
    out: list[Mapping[str, Any] | None] = []
    for item, is_output in walk:
        if isinstance(item, Mapping) and all(item.get(f) is not None for f in TOKEN_FIELDS):
            if is_output:
                out.append(None)  # a token-bearing item is a call, which shows the running list; it adds no image
            continue
        if not isinstance(item, Mapping) or item.get("role") == "assistant" or not isinstance(item.get("content"), list):
            continue
        out += [part for part in item["content"] if isinstance(part, Mapping) and part.get("type") in IMAGE_PART_TYPES]
    return out


def read_rollout(obj: Any) -> Rollout:
    """§3-§6: read one payload line, check it, and split it into traces; `Refusal` on its first error."""
    # §3 order 1: the envelope
    if not isinstance(obj, Mapping):
        raise Refusal("malformed_payload", None, None)
    run: Mapping[str, Any] | None = None
    resp: Any = obj
    if "response" in obj and "output" not in obj:
        run, resp = obj, obj["response"]
        if not isinstance(resp, Mapping):
            raise Refusal("malformed_payload", None, None)
    rollout_id = _rollout_name(resp)
    _check_field_types(run, resp, rollout_id)  # order 2
    contract, records, full = _read_contract(resp, rollout_id)  # order 3
    if contract is None:  # legacy: the response `id` is the logical rollout id; §3 order 3 requires a string
        if not isinstance(resp.get("id"), str):
            raise Refusal("malformed_payload", None, None)
        rollout_id = resp["id"]
    else:
        rollout_id = contract["rollout_id"]

    # §3 order 4: token items (§4: all three token fields non-null), typed in output order
    errors: list[tuple[str, int | None]] = []  # §4-§6 (code, turn), first one wins
    items: list[Mapping[str, Any]] = []
    for item in resp["output"]:
        have = [f for f in TOKEN_FIELDS if item.get(f) is not None]
        if len(have) == len(TOKEN_FIELDS):
            if not _fields_ok(item, TOKEN_ITEM_FIELDS):
                raise Refusal("malformed_payload", rollout_id, len(items) + 1)
            items.append(item)
        elif have:  # §4: a partial token item, skipped
            errors.append(("missing_token_evidence", len(items) + 1))

    # §3 order 5: image sources nested too deep
    assets: Mapping[str, Any] = resp.get("media_assets") or {}
    legacy_parts = _image_parts(run, resp) if contract is None else []
    sources = [assets[key]["source_part"] for key in sorted(assets)] + [p for p in legacy_parts if p is not None]
    if any(_deeper_than(source, MAX_NESTING) for source in sources):
        raise Refusal("malformed_payload", rollout_id, None)

    run = run or {}
    reward = run.get("reward")
    label = run.get("trainer_policy_version")
    mask_sample = bool((run.get("instance_config") or {}).get("mask_sample") or False)
    events: list[Mapping[str, Any]] = list(resp.get("boundary_events") or [])

    # §4 binding
    pairs: list[tuple[Mapping[str, Any], Mapping[str, Any] | None]]
    if records is None:
        pairs = [(item, None) for item in items]
    elif len(records) == len(items):
        pairs = list(zip(items, records))
    else:
        item_keys = [evidence_digest(i["prompt_token_ids"], i["generation_token_ids"], i["generation_log_probs"])
                     for i in items]

        def record_key(rec: Mapping[str, Any]) -> str:
            if full:
                return evidence_digest(rec["prompt_token_ids"], rec["sampled_token_ids"], rec["sampled_logprobs"])
            return rec["generation_evidence_digest"]

        bound: list[tuple[int, int]] = []
        next_item = 0
        for r, rec in enumerate(records):
            key = record_key(rec)
            match = next((i for i in range(next_item, len(items)) if item_keys[i] == key), None)
            if match is not None:
                bound.append((match, r))
                next_item = match + 1
        if not bound:
            errors.append(("metadata_count_mismatch", None))
            pairs = [(items[i], records[i]) for i in range(min(len(items), len(records)))]
        else:
            bound_records = {r for _, r in bound}
            unbound = sorted((rec["turn_id"], r) for r, rec in enumerate(records) if r not in bound_records)
            for turn, _ in unbound:  # ascending turn id, record order for equal ids
                if ("missing_token_evidence", turn) not in errors:
                    errors.append(("missing_token_evidence", turn))
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
            except ValueError:
                errors.append(("routed_experts_shape", turn))
        if rec is not None:
            if full:
                same = (rec["prompt_token_ids"] == item["prompt_token_ids"]
                        and rec["sampled_token_ids"] == item["generation_token_ids"]
                        and [float(x) for x in rec["sampled_logprobs"]]
                        == [float(x) for x in item["generation_log_probs"]])
                if not same:
                    errors.append(("evidence_digest_mismatch", turn))
            elif rec["generation_evidence_digest"] != evidence_digest(
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
            declared_append=rec["expected_append_compatible"] if rec is not None else False,
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
    if contract is not None:
        for key, asset in assets.items():
            rollout.parts[key] = asset["source_part"]
            if asset.get("original_dimensions") is not None:
                width, height = asset["original_dimensions"]
                rollout.dimensions[key] = (width, height)
    else:
        _bin_legacy_media(rollout, legacy_parts)

    _check_calls(rollout, assets, events, errors)
    if contract is not None:
        _check_assets(rollout, assets, errors)
    _segment(rollout, events, errors)
    by_turn = {c.turn_id: c for c in calls}
    for e in events:  # §5 E, every shape: a legacy call names no event
        call = by_turn.get(e["applies_to_step"])
        if call is None or call.event_id != e["event_id"]:
            errors.append(("orphan_compaction_event", e["applies_to_step"]))
    if not calls and contract is None:
        errors.append(("missing_token_evidence", None))  # §5 F
    if errors:
        code, turn = errors[0]
        raise Refusal(code, rollout_id, turn)
    return rollout


def _bin_legacy_media(rollout: Rollout, walk: Sequence[Mapping[str, Any] | None]) -> None:
    """§4 legacy media binning: each call shows the running list of image parts met before it."""
    running: list[str] = []
    shown: list[tuple[str, ...]] = []
    for part in walk:
        if part is None:
            shown.append(tuple(running))
            continue
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
            s = 0.0
            if min(others) == max(others):  # equal members: b is that value, s is 0 (a float mean may be off by an ulp)
                b = others[0]
            else:
                b = math.fsum(others) / m
                s = math.sqrt(math.fsum((x - b) ** 2 for x in others) / (m - 1))  # unequal members: m >= 2
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
    for r in ordered:  # still check 3: GRPO needs one reward per rollout
        if r.reward is None:
            raise Refusal("malformed_payload", r.rollout_id, None)
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
               pixel_cache: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """§8-§12 rows (real rows in canonical order, then padding) and §14 metrics; §7 checks 6-7 on the way."""
    groups: dict[str, list[int]] = {}
    for k, r in enumerate(ordered):
        groups.setdefault(r.group_key, []).append(k)
    advantage = [0.0] * len(ordered)
    unclipped = [0.0] * len(ordered)
    for members in groups.values():
        rewards = [float(ordered[k].reward) for k in members]  # type: ignore[arg-type]  (§7.3 checked them)
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


def _pixel_digest(r: Rollout, media_id: str, turn: int, cache: dict[str, tuple[str, tuple[int, int]] | None]) -> str:
    """§13 pixel digest of one image of a row, checking decode and, for every asset, its declared dimensions (§7).
    `cache` keeps each data URL's decoded (digest, (width, height)), or None when it does not decode."""
    part = r.parts.get(media_id)
    url = image_url(part) if part is not None else None
    if url is None:
        raise Refusal("media_decode", r.rollout_id, turn)
    if url not in cache:
        try:
            rgb = decode_pixels(url)
            cache[url] = (pixel_digest(rgb), (rgb.shape[1], rgb.shape[0]))
        except Exception:  # noqa: BLE001 - whatever Pillow or base64 refuse is "not decodable"
            cache[url] = None
    decoded = cache[url]
    if decoded is None:
        raise Refusal("media_decode", r.rollout_id, turn)
    digest, size = decoded
    declared = r.dimensions.get(media_id)
    if declared is not None and _is_gym_media_id(media_id) and declared != size:
        raise Refusal("media_dimensions_mismatch", r.rollout_id, turn)
    return digest


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
        "global_valid_toks": sum(row["sample_mask"] * sum(b - a for a, b in row["mask_spans"]) for row in rows),
        "global_valid_seqs": sum(row["sample_mask"] for row in rows),
        "num_valid_samples": sum(row["sample_mask"] for row in rows),
    }


# --------------------------------------------------------------------------------- §2 the driver


def _lines(path: Path) -> list[Any]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def replay_step(scenario: str, step: int, results: Sequence[Any], t: Trainer,
                pixel_cache: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, float] | None]:
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
        cache: dict[str, Any] = {}
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
