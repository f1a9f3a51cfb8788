"""Adversarial mutations of otherwise valid Gym evidence, each with the error code it must provoke.

Every mutation is a pure function from a valid response dict (transport, PR #2870 or full
shape, with at least one declared boundary, one append-compatible call and one image) to a new
dict that breaks exactly one contract rule. Mutations that touch token arrays re-seal the digest
so that the targeted rule, not the digest check, is what fires.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from compactsim.harness.core.digests import GYM_MEDIA_ID, canonical_digest, generation_evidence_digest
from compactsim.harness.core.errors import ContractCode

Payload = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Mutation:
    """One adversarial edit and the contract code a correct consumer must raise for it."""

    name: str
    code: ContractCode
    purpose: str
    apply: Callable[[Payload], Payload]
    #: where a consumer finds the break: the rollout's plan (its evidence and declarations), or only when it
    #: materializes rows and decodes the images (the plan holds media ids, not pixels)
    stage: Literal["plan", "materialize"] = "plan"


class MutationNotApplicable(ValueError):
    """The payload lacks what this mutation needs (e.g. no boundary to spoof)."""


def _body(payload: Payload) -> Payload:
    return payload["response"] if "response" in payload and "output" not in payload else payload


def _records(resp: Payload) -> list[dict[str, Any]]:
    return resp.get("model_call_metadata") or resp.get("completion_evidence") or []


def _token_items(resp: Payload) -> list[dict[str, Any]]:
    return [item for item in resp["output"] if isinstance(item, dict) and item.get("generation_token_ids") is not None]


def _contract(resp: Payload) -> dict[str, Any]:
    return resp.get("context_compaction_contract") or resp["rollout_trace_contract"]


def _reseal(resp: Payload, index: int) -> None:
    """Recompute the digest (or the schema-2 arrays) of call `index` after editing its item."""
    item, rec = _token_items(resp)[index], _records(resp)[index]
    if "generation_evidence_digest" in rec:
        rec["generation_evidence_digest"] = generation_evidence_digest(
            item["prompt_token_ids"], item["generation_token_ids"], item["generation_log_probs"]
        )
    else:
        rec["prompt_token_ids"] = list(item["prompt_token_ids"])
        rec["sampled_token_ids"] = list(item["generation_token_ids"])
        rec["sampled_logprobs"] = list(item["generation_log_probs"])


def _boundary_index(resp: Payload) -> int:
    for i, rec in enumerate(_records(resp)):
        if rec.get("compaction_event_id"):
            return i
    raise MutationNotApplicable("payload has no call with a compaction_event_id")


def _append_index(resp: Payload) -> int:
    for i, rec in enumerate(_records(resp)):
        if i > 0 and rec.get("expected_append_compatible"):
            return i
    raise MutationNotApplicable("payload has no append-compatible call")


def _media_index(resp: Payload) -> int:
    for i, rec in enumerate(_records(resp)):
        if rec.get("media_ids"):
            return i
    raise MutationNotApplicable("payload has no call with media")


def _mutating(fn: Callable[[Payload], None]) -> Callable[[Payload], Payload]:
    """A mutation on a deep copy; a payload without the part it edits (no second record, no image) is
    `MutationNotApplicable`, never the `IndexError` or `KeyError` the edit ran into."""

    def apply(payload: Payload) -> Payload:
        out = copy.deepcopy(payload)
        try:
            fn(_body(out))
        except (IndexError, KeyError) as exc:
            raise MutationNotApplicable(f"{fn.__name__}: the payload lacks the part it edits ({exc!r})") from None
        return out

    apply.__name__ = fn.__name__
    apply.__doc__ = fn.__doc__
    return apply


@_mutating
def spoof_append_declaration(resp: Payload) -> None:
    """Declare the rewrite call append-compatible and hide its boundary."""
    i = _boundary_index(resp)
    rec = _records(resp)[i]
    event_id = rec["compaction_event_id"]
    rec["expected_append_compatible"] = True
    rec["compaction_event_id"] = None
    resp["boundary_events"] = [e for e in resp["boundary_events"] if e["event_id"] != event_id]


@_mutating
def drop_boundary_declaration(resp: Payload) -> None:
    """Remove the boundary event and the call's reference to it (no declaration at all)."""
    i = _boundary_index(resp)
    rec = _records(resp)[i]
    event_id = rec["compaction_event_id"]
    rec["compaction_event_id"] = None
    resp["boundary_events"] = [e for e in resp["boundary_events"] if e["event_id"] != event_id]


@_mutating
def boundary_on_prefix_continuation(resp: Payload) -> None:
    """Declare a boundary on a call whose prompt really extends the previous context."""
    i = _append_index(resp)
    rec = _records(resp)[i]
    event_id = f"boundary-{rec['turn_id']:06d}-spoofed00000"
    rec["expected_append_compatible"] = False
    rec["compaction_event_id"] = event_id
    resp["boundary_events"].append(
        {"event_id": event_id, "trigger_after_step": rec["turn_id"] - 1, "applies_to_step": rec["turn_id"],
         "reason": "history_policy_rewrite"}
    )


@_mutating
def ghost_media(resp: Payload) -> None:
    """Reference a media id that media_assets does not hold."""
    _records(resp)[-1]["media_ids"].append("ghost")


@_mutating
def remove_media_asset(resp: Payload) -> None:
    """Drop the asset of an image a call still references."""
    media_id = _records(resp)[_media_index(resp)]["media_ids"][0]
    del resp["media_assets"][media_id]


def _two_assets(resp: Payload) -> tuple[str, str]:
    """The first image a call shows and another asset (ids, in the order calls first show them)."""
    seen: list[str] = []
    for rec in _records(resp):
        seen += [m for m in rec.get("media_ids") or () if m not in seen and m in (resp.get("media_assets") or {})]
    if len(seen) < 2:
        raise MutationNotApplicable("payload has fewer than two media assets")
    return seen[0], seen[1]


@_mutating
def swap_image_pixels(resp: Payload) -> None:
    """The first image's pixels are another image's, its media id and content_digest kept (a swapped screenshot)."""
    first, other = _two_assets(resp)
    assets = resp["media_assets"]
    if not GYM_MEDIA_ID.fullmatch(first):
        raise MutationNotApplicable(f"media id {first!r} is opaque: it makes no claim about its pixels")
    if assets[first]["source_part"] == assets[other]["source_part"]:
        raise MutationNotApplicable("the two images are the same")
    assets[first]["source_part"] = copy.deepcopy(assets[other]["source_part"])


@_mutating
def misfile_media_asset(resp: Payload) -> None:
    """The first image's entry holds another image's asset (filed under the wrong key)."""
    first, other = _two_assets(resp)
    assets = resp["media_assets"]
    assets[first] = copy.deepcopy(assets[other])


@_mutating
def corrupt_digest(resp: Payload) -> None:
    """Alter a logprob without resealing: the evidence no longer matches its record."""
    i = len(_token_items(resp)) - 1
    item = _token_items(resp)[i]
    item["generation_log_probs"][0] = float(item["generation_log_probs"][0]) - 0.5


@_mutating
def shift_prompt_token(resp: Payload) -> None:
    """Change one prompt token of an append-compatible call (digest resealed: a consistent forgery)."""
    i = _append_index(resp)
    item = _token_items(resp)[i]
    item["prompt_token_ids"][0] = item["prompt_token_ids"][0] + 1
    _reseal(resp, i)


@_mutating
def drop_logprob(resp: Payload) -> None:
    """One sampled id loses its logprob (resealed)."""
    i = len(_token_items(resp)) - 1
    _token_items(resp)[i]["generation_log_probs"].pop()
    _reseal(resp, i)


@_mutating
def dangling_compaction_event(resp: Payload) -> None:
    """Point the rewrite call at a boundary event that does not exist."""
    _records(resp)[_boundary_index(resp)]["compaction_event_id"] = "boundary-999999-000000000000"


@_mutating
def drop_call_record(resp: Payload) -> None:
    """Lose one per-call metadata record: records and token items no longer pair up."""
    _records(resp).pop()


@_mutating
def partial_token_fields(resp: Payload) -> None:
    """A token-bearing item without its logprobs."""
    del _token_items(resp)[0]["generation_log_probs"]


@_mutating
def swap_turn_ids(resp: Payload) -> None:
    """Two call records out of order."""
    recs = _records(resp)
    if len(recs) < 2:
        raise MutationNotApplicable(f"payload has {len(recs)} call record(s); swapping turn ids needs two")
    recs[0]["turn_id"], recs[1]["turn_id"] = recs[1]["turn_id"], recs[0]["turn_id"]


@_mutating
def foreign_rollout_id(resp: Payload) -> None:
    """A call record that claims another rollout."""
    _records(resp)[-1]["rollout_id"] = _contract(resp)["rollout_id"] + "-other"


@_mutating
def surplus_route_rows(resp: Payload) -> None:
    """routed_experts with two more rows than prompt + sampled tokens."""
    item = _token_items(resp)[0]
    rows = len(item["prompt_token_ids"]) + len(item["generation_token_ids"]) + 2
    item["routed_experts"] = [[[0, 1]] for _ in range(rows)]


@_mutating
def positive_logprob(resp: Payload) -> None:
    """The last call's first sampled logprob becomes +0.25, a probability above 1 (resealed: a consistent forgery)."""
    i = len(_token_items(resp)) - 1
    _token_items(resp)[i]["generation_log_probs"][0] = 0.25
    _reseal(resp, i)


@_mutating
def negative_route_id(resp: Payload) -> None:
    """The first call's routes, rewritten as NeMo-RL's ``nrlre1:int16:SxLxK:<base64>`` wire envelope with its first id
    -2 (only -1, the missing-route sentinel, is negative). A JSON list cannot hold it: there it is a type error."""
    item = _token_items(resp)[0]
    routes = np.asarray(item.get("routed_experts") or [], dtype="<i2")
    if routes.ndim != 3 or routes.size == 0:
        raise MutationNotApplicable("the first call records no routed experts as a list of rows")
    routes[0, 0, 0] = -2
    s, layers, k = routes.shape
    item["routed_experts"] = f"nrlre1:int16:{s}x{layers}x{k}:" + base64.b64encode(routes.tobytes()).decode("ascii")


@_mutating
def misstate_image_dimensions(resp: Payload) -> None:
    """The first image's asset declares a width one pixel wider than its pixels (its digest, over the pixels, still holds)."""
    media_id = _records(resp)[_media_index(resp)]["media_ids"][0]
    asset = (resp.get("media_assets") or {}).get(media_id)
    if not GYM_MEDIA_ID.fullmatch(media_id) or not isinstance(asset, dict):
        raise MutationNotApplicable(f"media id {media_id!r} is opaque or has no asset: its dimensions are not held to it")
    if not isinstance(asset.get("original_dimensions"), list) or len(asset["original_dimensions"]) != 2:
        raise MutationNotApplicable(f"media id {media_id!r} declares no [width, height]")
    width, height = asset["original_dimensions"]
    asset["original_dimensions"] = [width + 1, height]


def _renamed(node: Any, names: dict[str, str]) -> Any:
    """`node` with every string (value or key) found in `names` replaced by its new name."""
    if isinstance(node, dict):
        return {names.get(k, k): _renamed(v, names) for k, v in node.items()}
    if isinstance(node, list):
        return [_renamed(v, names) for v in node]
    return names.get(node, node) if isinstance(node, str) else node


@_mutating
def undecodable_image(resp: Payload) -> None:
    """The first image's source part holds bytes that are no image, under a new content-addressed id and digest that
    match those bytes (Gym registered a corrupt upload): only decoding it can tell."""
    media_id = _records(resp)[_media_index(resp)]["media_ids"][0]
    asset = (resp.get("media_assets") or {}).get(media_id)
    part = asset.get("source_part") if isinstance(asset, dict) else None
    if not GYM_MEDIA_ID.fullmatch(media_id) or not isinstance(part, dict) or not isinstance(part.get("image_url"), str):
        raise MutationNotApplicable(f"media id {media_id!r} is opaque or its asset holds no image_url")
    part = {**part, "image_url": "data:image/png;base64," + base64.b64encode(b"not an image").decode("ascii")}
    digest = canonical_digest(part)
    new_id = "media-" + digest[:24]
    renamed = _renamed(resp, {media_id: new_id, asset["content_digest"]: digest})
    renamed["media_assets"][new_id]["source_part"] = part
    resp.clear()  # the mutation edits the body in place
    resp.update(renamed)


@_mutating
def unknown_schema_version(resp: Payload) -> None:
    """A contract schema this consumer does not know."""
    if "context_compaction_contract" not in resp:
        raise MutationNotApplicable("only the 0.7.0 shape has schema_version")
    resp["context_compaction_contract"]["schema_version"] = 4


@_mutating
def reorder_trace_media(resp: Payload) -> None:
    """Inside one physical trace a later call loses the image the previous call showed."""
    i = _append_index(resp)
    assets = sorted(resp.get("media_assets") or {})
    if not assets:
        raise MutationNotApplicable("payload has no media asset")
    recs = _records(resp)
    recs[i - 1]["media_ids"] = [assets[0]]
    recs[i]["media_ids"] = []


MUTATIONS: tuple[Mutation, ...] = (
    Mutation("spoof_append_declaration", "append_declaration_mismatch",
             "Gym claims append-compatibility the tokens do not show", spoof_append_declaration),
    Mutation("drop_boundary_declaration", "undeclared_discontinuity",
             "a rewrite with no declaration must not be split silently", drop_boundary_declaration),
    Mutation("boundary_on_prefix_continuation", "boundary_without_rewrite",
             "a boundary that does not correspond to a rewrite", boundary_on_prefix_continuation),
    Mutation("ghost_media", "unknown_media_asset", "a call references media id 'ghost'", ghost_media),
    Mutation("remove_media_asset", "unknown_media_asset", "an asset is missing for a used image", remove_media_asset),
    Mutation("swap_image_pixels", "media_digest_mismatch", "an image replaced under its own id and digest",
             swap_image_pixels),
    Mutation("misfile_media_asset", "media_asset_key_mismatch", "an asset filed under another image's id",
             misfile_media_asset),
    Mutation("corrupt_digest", "evidence_digest_mismatch", "token evidence altered after sealing", corrupt_digest),
    Mutation("shift_prompt_token", "append_declaration_mismatch",
             "a resealed forgery of one prompt token inside a trace", shift_prompt_token),
    Mutation("drop_logprob", "token_logprob_length_mismatch", "two sampled ids, one logprob", drop_logprob),
    Mutation("dangling_compaction_event", "orphan_compaction_event",
             "compaction_event_id names no boundary event", dangling_compaction_event),
    Mutation("drop_call_record", "metadata_count_mismatch", "fewer records than token items", drop_call_record),
    Mutation("partial_token_fields", "missing_token_evidence", "a token item without logprobs", partial_token_fields),
    Mutation("swap_turn_ids", "turn_order", "turn ids out of order", swap_turn_ids),
    Mutation("foreign_rollout_id", "rollout_id_mismatch", "a record from another rollout", foreign_rollout_id),
    Mutation("surplus_route_rows", "routed_experts_shape", "more than one surplus route row", surplus_route_rows),
    Mutation("positive_logprob", "logprob_out_of_range", "a sampled logprob above 0", positive_logprob),
    Mutation("negative_route_id", "routed_expert_id_out_of_range", "a routed expert id of -2", negative_route_id),
    Mutation("misstate_image_dimensions", "media_dimensions_mismatch",
             "an asset declares dimensions its pixels do not have", misstate_image_dimensions, stage="materialize"),
    Mutation("undecodable_image", "media_decode", "an asset whose source part is not an image", undecodable_image,
             stage="materialize"),
    Mutation("unknown_schema_version", "unsupported_contract", "schema_version 4", unknown_schema_version),
    Mutation("reorder_trace_media", "media_continuity",
             "media inside a trace do not extend the previous call's", reorder_trace_media),
)

MUTATIONS_BY_NAME: dict[str, Mutation] = {m.name: m for m in MUTATIONS}

__all__ = ["MUTATIONS", "MUTATIONS_BY_NAME", "Mutation", "MutationNotApplicable", "Payload"]
