"""Split a logical rollout into physical traces, verifying every declaration against the tokens.

With a contract, Gym's boundary declarations decide where a new physical trace starts, and the
planner checks them in both directions: a declared append must really extend the previous
prompt + sampled ids, and a declared boundary must really break that prefix. Without a contract
(the legacy path) every call must be a prefix continuation. `strict=False` never raises on
violations: it segments by what the tokens show and lists every violation for diagnosis.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from compactsim.harness.core.digests import MAX_DIGEST_DEPTH, canonical_digest, nesting_depth
from compactsim.harness.core.errors import ContractError
from compactsim.harness.core.evidence import MediaAsset, ModelCall, RolloutEvidence
from compactsim.harness.core.trace_plan import PhysicalTrace, StartReason, TracePlan, Violation, physical_trace_id
from compactsim.harness.pipeline.ingest import UNKNOWN_ROLLOUT, ingest_result
from compactsim.harness.pipeline.media import GYM_MEDIA_ID

#: Tokens shown on each side of the first mismatch in a discontinuity diagnostic.
DIAGNOSTIC_WINDOW = 16
LIKELY_CAUSES = (
    "token merging / retokenization when messages are concatenated by the chat template",
    "truncated history (long context or tool output cut)",
    "stripped reasoning (a template that drops earlier <think> blocks on re-render)",
)


def plan_rollout(result: Mapping[str, object] | RolloutEvidence, *, strict: bool = True) -> TracePlan:
    """Plan one Gym result (bare response, `/run` result, or already-normalised evidence).

    >>> plan = plan_rollout(json.load(open("examples/gym-0.7.0-transport-compacted-3call.json")))
    >>> [t.turn_ids for t in plan.traces]
    [(1, 2), (3,)]
    """
    if isinstance(result, RolloutEvidence):
        evidence, found = result, []
    else:
        try:
            ingested = ingest_result(result)
        except ContractError as exc:
            if strict:
                raise
            return _unreadable_plan(exc)
        evidence, found = ingested.evidence, list(ingested.violations)
    plan = plan_evidence(evidence, found)
    if strict and plan.violations:
        v = plan.violations[0]
        raise ContractError(v.code, rollout_id=evidence.rollout_id, turn_id=v.turn_id, detail=v.detail)  # type: ignore[arg-type]
    return plan


def plan_evidence(evidence: RolloutEvidence, found: Sequence[Violation] = ()) -> TracePlan:
    """Segment `evidence` and collect violations (never raises); `found` are earlier ones."""
    violations = list(found)
    calls = evidence.calls
    _check_calls(evidence, violations)
    _check_media_assets(evidence, violations)
    starts = _segment(evidence, violations)
    _check_unreferenced_events(evidence, violations)
    traces = _build_traces(evidence.rollout_id, calls, starts)
    path = "physical" if any(t.start_reason != "rollout_start" for t in traces) else "single"
    return TracePlan(
        rollout_id=evidence.rollout_id,
        path=path,
        traces=tuple(traces),
        evidence=evidence,
        violations=tuple(violations),
    )


# ---------------------------------------------------------------------------------------------
# per-call checks


def _check_calls(evidence: RolloutEvidence, out: list[Violation]) -> None:
    events = {e.event_id: e for e in evidence.boundary_events}
    route_shape: tuple[int, int] | None = None
    assets = evidence.media_assets if evidence.has_contract else None
    for index, call in enumerate(evidence.calls):
        turn = call.turn_id
        if turn != index + 1:
            out.append(
                Violation("turn_order", turn, f"call #{index + 1} in output order has turn_id {turn}; expected {index + 1}")
            )
        if len(call.sampled_token_ids) != len(call.sampled_logprobs):
            out.append(
                Violation(
                    "token_logprob_length_mismatch",
                    turn,
                    f"generation_token_ids has {len(call.sampled_token_ids)} ids, "
                    f"generation_log_probs has {len(call.sampled_logprobs)}",
                )
            )
        positive = _first_positive(call.sampled_logprobs)
        if positive is not None:
            out.append(
                Violation(
                    "logprob_out_of_range",
                    turn,
                    f"generation_log_probs[{positive}]={call.sampled_logprobs[positive]!r}: a log-probability must be "
                    "<= 0 (a probability above 1 is not a sampled token's logprob)",
                )
            )
        if assets is not None:
            for media_id in call.media_ids:
                if media_id not in assets:
                    out.append(
                        Violation(
                            "unknown_media_asset",
                            turn,
                            f"media id {media_id!r} is not in media_assets ({len(evidence.media_assets)} assets)",
                        )
                    )
        if call.routed_experts is not None:
            route_shape = _check_routes(call, route_shape, out)
        if call.compaction_event_id is not None:
            event = events.get(call.compaction_event_id)
            if event is None:
                out.append(
                    Violation(
                        "orphan_compaction_event",
                        turn,
                        f"compaction_event_id {call.compaction_event_id!r} names no boundary event",
                    )
                )
            elif event.applies_to_step != turn:
                out.append(
                    Violation(
                        "orphan_compaction_event",
                        turn,
                        f"compaction_event_id {call.compaction_event_id!r} applies_to_step="
                        f"{event.applies_to_step}, not this turn",
                    )
                )


def _first_positive(logprobs: Sequence[float]) -> int | None:
    """Index of the first logprob > 0, or None; `max` (one C pass) clears the usual all-negative call.

    `max` skips a NaN anywhere but first (no comparison with it is true), so a real maximum <= 0
    proves no entry is > 0; a NaN maximum falls back to the element-wise scan.
    """
    if not logprobs:
        return None
    top = max(logprobs)
    if top == top and not top > 0.0:
        return None
    return next((j for j, lp in enumerate(logprobs) if lp > 0.0), None)


def _check_routes(call: ModelCall, shape: tuple[int, int] | None, out: list[Violation]) -> tuple[int, int] | None:
    routes = call.routed_experts
    if routes is None:
        return shape
    if routes.ndim != 3 or routes.shape[1] < 1 or routes.shape[2] < 1:
        out.append(
            Violation(
                "routed_experts_shape",
                call.turn_id,
                f"routed_experts shape {list(routes.shape)}: every token needs at least one layer and one top-k "
                "slot (a zero-width route cannot be replayed)",
            )
        )
        return shape
    lowest = int(routes.min()) if routes.size else 0  # one contiguous pass decides both checks below
    if lowest < -1:
        token, layer, slot = (int(x) for x in np.argwhere(routes < -1)[0])
        out.append(
            Violation(
                "routed_expert_id_out_of_range",
                call.turn_id,
                f"routed_experts[{token}][{layer}][{slot}]={int(routes[token, layer, slot])}: expert ids are >= 0, "
                "and -1 is the only missing-route sentinel",
            )
        )
        return shape
    valid = call.num_tokens
    rows = routes.shape[0]
    if rows < valid or rows > valid + 1:
        out.append(
            Violation(
                "routed_experts_shape",
                call.turn_id,
                f"routed_experts has {rows} rows for {valid} tokens (prompt + sampled); vLLM packing allows "
                f"{valid} or {valid + 1} (at most one surplus final-token route)",
            )
        )
        return shape
    if lowest < 0:  # only a route holding a -1 can be partly -1 (axis-2 reductions over K are slow)
        _check_partial_routes(call, routes, out)
    this = (int(routes.shape[1]), int(routes.shape[2]))
    if shape is not None and this != shape:
        out.append(
            Violation(
                "routed_experts_shape",
                call.turn_id,
                f"routed_experts has [layers, topk]={list(this)} but earlier calls have {list(shape)}",
            )
        )
        return shape
    return this


def _check_partial_routes(call: ModelCall, routes: np.ndarray, out: list[Violation]) -> None:
    negative = routes < 0
    partial = negative.any(axis=2) & ~negative.all(axis=2)
    if partial.any():
        token, layer = (int(x) for x in np.argwhere(partial)[0])
        out.append(
            Violation(
                "routed_experts_shape",
                call.turn_id,
                f"routed_experts row {token} layer {layer} is partly -1; a missing route must be all -1",
            )
        )


def _check_media_assets(evidence: RolloutEvidence, out: list[Violation]) -> None:
    """Each asset is filed under its own id, and a content-addressed one still matches its content.

    Gym's `media_id` is `"media-" + content_digest[:24]` and `content_digest` is the canonical
    digest of the `source_part` that carries the pixels (gym-contract §2.4), so replacing the image
    while keeping the id and digest is caught here. Opaque ids (not Gym's form) make no claim to
    check. The turn named is the first call that shows the image.
    """
    if not evidence.has_contract:
        return  # legacy ids are computed from the parts themselves
    first_use: dict[str, int] = {}
    for call in evidence.calls:
        for media_id in call.media_ids:
            first_use.setdefault(media_id, call.turn_id)
    for key, asset in evidence.media_assets.items():
        turn = first_use.get(key)
        if asset.media_id != key:
            out.append(
                Violation(
                    "media_asset_key_mismatch",
                    turn,
                    f"media_assets[{key[:60]!r}] holds the asset of media id {asset.media_id[:60]!r}",
                )
            )
            continue
        problem = _content_problem(asset)
        if problem is not None:
            out.append(Violation("media_digest_mismatch", turn, f"media asset {key[:60]!r}: {problem}"))


def _content_problem(asset: MediaAsset) -> str | None:
    if not GYM_MEDIA_ID.fullmatch(asset.media_id):
        return None
    if nesting_depth(asset.source_part) > MAX_DIGEST_DEPTH:
        return f"source_part nests deeper than {MAX_DIGEST_DEPTH} levels"
    actual = canonical_digest(asset.source_part)
    if asset.content_digest is not None and asset.content_digest != actual:
        return (
            f"content_digest {asset.content_digest[:16]}... does not recompute from its source_part "
            f"({actual[:16]}...): the image was replaced after it was registered"
        )
    if asset.media_id != "media-" + actual[:24]:
        return f"the content-addressed id does not match its source_part (which digests to media-{actual[:24]})"
    return None


def _check_unreferenced_events(evidence: RolloutEvidence, out: list[Violation]) -> None:
    by_turn = {c.turn_id: c for c in evidence.calls}
    for event in evidence.boundary_events:
        call = by_turn.get(event.applies_to_step)
        if call is None:
            out.append(
                Violation(
                    "orphan_compaction_event",
                    event.applies_to_step,
                    f"boundary event {event.event_id!r} applies_to_step={event.applies_to_step} but the rollout "
                    f"has no such call ({len(evidence.calls)} calls)",
                )
            )
        elif call.compaction_event_id != event.event_id:
            out.append(
                Violation(
                    "orphan_compaction_event",
                    call.turn_id,
                    f"boundary event {event.event_id!r} applies to step {call.turn_id} but that call's "
                    f"compaction_event_id is {call.compaction_event_id!r}",
                )
            )


# ---------------------------------------------------------------------------------------------
# segmentation


@dataclass(frozen=True, slots=True)
class _Start:
    call_index: int
    reason: StartReason


def _is_prefix(prefix: Sequence[int], seq: Sequence[int]) -> bool:
    n = len(prefix)
    return len(seq) >= n and seq[:n] == prefix


def _extends(prev: ModelCall, prompt: Sequence[int]) -> bool:
    """`prev.prompt + prev.sampled` is a prefix of `prompt`, compared in two pieces (no concatenated copy).

    The short sampled piece is compared by value; the long prompt piece is accepted outright when
    `prompt` starts with the very same id objects (ingest shares them when a prompt extends the
    previous context), and otherwise compared by value too.
    """
    head, tail = prev.prompt_token_ids, prev.sampled_token_ids
    n_head = len(head)
    n = n_head + len(tail)
    if len(prompt) < n:
        return False
    return prompt[n_head:n] == tail and (_starts_with_same_objects(prompt, head) or prompt[:n_head] == head)


def _c_memcmp():  # the C library's memcmp, already in the process on POSIX; None where it cannot be found
    try:
        memcmp = ctypes.CDLL(None).memcmp
    except (AttributeError, OSError, TypeError):
        return None
    memcmp.restype = ctypes.c_int
    memcmp.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
    return memcmp


_MEMCMP = _c_memcmp()
#: CPython stores a tuple's item pointers from `tuple.__basicsize__` on, `tuple.__itemsize__` apart,
#: and `id()` is an object's address (documented CPython details); elsewhere the shortcut is off.
_RAW_TUPLES = (
    _MEMCMP is not None
    and sys.implementation.name == "cpython"
    and tuple.__itemsize__ == ctypes.sizeof(ctypes.c_void_p)
)


def _starts_with_same_objects(seq: Sequence[int], prefix: Sequence[int]) -> bool:
    """True only if `seq` starts with exactly the objects of `prefix` (same identities, in order).

    Tuple `==` tests identity before value for each element, so this is an exact shortcut for
    accepting, never a reason to reject: False just means "compare by value". It compares the two
    item-pointer arrays in place instead of slicing `seq`, a copy that also touches every id
    object twice (reference counts) and was most of the planner's time.
    """
    if not _RAW_TUPLES or type(seq) is not tuple or type(prefix) is not tuple or len(prefix) > len(seq):
        return False
    items = tuple.__basicsize__
    return _MEMCMP(id(seq) + items, id(prefix) + items, len(prefix) * tuple.__itemsize__) == 0


def _segment(evidence: RolloutEvidence, out: list[Violation]) -> list[_Start]:
    """Where physical traces start; declarations are checked against the tokens both ways."""
    calls = evidence.calls
    if not calls:
        return []
    applied = {e.applies_to_step for e in evidence.boundary_events}
    starts = [_Start(0, "rollout_start")]
    first = calls[0]
    if evidence.has_contract:
        if first.expected_append_compatible:
            out.append(
                Violation(
                    "append_declaration_mismatch",
                    first.turn_id,
                    "call 1 is declared append-compatible but there is no previous call to extend",
                )
            )
        if first.compaction_event_id is not None or first.turn_id in applied:
            out.append(
                Violation(
                    "boundary_without_rewrite",
                    first.turn_id,
                    "a boundary applies to the first call, which has no previous context to rewrite",
                )
            )
    has_contract = evidence.has_contract
    for i in range(1, len(calls)):
        prev, call = calls[i - 1], calls[i]
        continues = _extends(prev, call.prompt_token_ids)
        if not has_contract:
            if not continues:
                out.append(Violation("undeclared_discontinuity", call.turn_id, _discontinuity_detail(prev, call, legacy=True)))
                starts.append(_Start(i, "inferred_discontinuity"))
            continue
        declared_boundary = call.compaction_event_id is not None or call.turn_id in applied
        declared_append = bool(call.expected_append_compatible)
        if continues:
            if declared_boundary:
                out.append(
                    Violation(
                        "boundary_without_rewrite",
                        call.turn_id,
                        f"a boundary applies to turn {call.turn_id}, but its prompt extends the previous "
                        f"prompt + sampled ids ({prev.num_tokens} tokens): it does not correspond to a rewrite",
                    )
                )
            elif not declared_append:
                out.append(
                    Violation(
                        "append_declaration_mismatch",
                        call.turn_id,
                        f"turn {call.turn_id} is declared not append-compatible without a boundary event, "
                        "but its prompt extends the previous prompt + sampled ids",
                    )
                )
            if not _is_prefix(prev.media_ids, call.media_ids):
                out.append(
                    Violation(
                        "media_continuity",
                        call.turn_id,
                        f"inside one physical trace media {list(call.media_ids)} do not extend the previous "
                        f"call's {list(prev.media_ids)}",
                    )
                )
            continue
        if declared_append:
            context = prev.prompt_token_ids + prev.sampled_token_ids
            offset = _mismatch_offset(context, call.prompt_token_ids)
            out.append(
                Violation(
                    "append_declaration_mismatch",
                    call.turn_id,
                    f"turn {call.turn_id} is declared append-compatible but its prompt does not extend the previous "
                    f"prompt + sampled ids: the append-compatibility declaration disagrees with the tokens "
                    f"(previous context {len(context)} tokens, first mismatch at offset {offset})",
                )
            )
            starts.append(_Start(i, "declared_boundary" if declared_boundary else "inferred_discontinuity"))
        elif declared_boundary:
            starts.append(_Start(i, "declared_boundary"))
        else:
            out.append(Violation("undeclared_discontinuity", call.turn_id, _discontinuity_detail(prev, call, legacy=False)))
            starts.append(_Start(i, "inferred_discontinuity"))
    return starts


def _mismatch_offset(context: Sequence[int], prompt: Sequence[int]) -> int:
    n = min(len(context), len(prompt))
    a = np.asarray(context[:n], dtype=np.int64)
    b = np.asarray(prompt[:n], dtype=np.int64)
    diff = np.flatnonzero(a != b)
    return int(diff[0]) if diff.size else n


def _discontinuity_detail(prev: ModelCall, call: ModelCall, *, legacy: bool) -> str:
    """The diagnostic a person needs: where, how long, which tokens, which media, why."""
    context = prev.prompt_token_ids + prev.sampled_token_ids
    prompt = call.prompt_token_ids
    offset = _mismatch_offset(context, prompt)
    lo = max(0, offset - DIAGNOSTIC_WINDOW)
    hi = offset + DIAGNOSTIC_WINDOW
    if legacy:
        media = "media: not declared (no contract)"
        head = (
            f"non-contiguous prompt at turn {call.turn_id} (first divergent turn) and no rollout trace contract "
            "declares a boundary"
        )
    else:
        cont = _is_prefix(prev.media_ids, call.media_ids)
        media = f"media continuity: {'kept' if cont else 'broken'} ({list(prev.media_ids)} -> {list(call.media_ids)})"
        head = f"turn {call.turn_id} does not extend the previous context and no boundary event declares a rewrite"
    causes = "; ".join(f"({k}) {c}" for k, c in enumerate(LIKELY_CAUSES, 1))
    return (
        f"{head}; previous context length {len(context)}, prompt length {len(prompt)}, mismatch offset {offset}; "
        f"previous context[{lo}:{hi}]={list(context[lo:hi])}; prompt[{lo}:{hi}]={list(prompt[lo:hi])}; "
        f"{media}; likely causes: {causes}"
    )


def _build_traces(rollout_id: str, calls: Sequence[ModelCall], starts: list[_Start]) -> list[PhysicalTrace]:
    traces: list[PhysicalTrace] = []
    bounds = [s.call_index for s in starts] + [len(calls)]
    for k, start in enumerate(starts):
        members = range(bounds[k], bounds[k + 1])
        last = calls[members[-1]]
        traces.append(
            PhysicalTrace(
                trace_id=physical_trace_id(rollout_id, k),
                trace_index=k,
                call_indices=tuple(members),
                turn_ids=tuple(calls[j].turn_id for j in members),
                media_ids=last.media_ids,
                start_reason=start.reason,
                num_tokens=last.num_tokens,
                num_sampled_tokens=sum(len(calls[j].sampled_token_ids) for j in members),
            )
        )
    return traces


def _unreadable_plan(exc: ContractError) -> TracePlan:
    rollout_id = exc.rollout_id or UNKNOWN_ROLLOUT
    evidence = RolloutEvidence(rollout_id=rollout_id, flavour="none", calls=())
    return TracePlan(
        rollout_id=rollout_id,
        path="single",
        traces=(),
        evidence=evidence,
        violations=(Violation(exc.code, exc.turn_id, exc.detail),),
    )


__all__ = ["DIAGNOSTIC_WINDOW", "LIKELY_CAUSES", "plan_evidence", "plan_rollout"]
