"""The expected physical traces of one rollout, or the contract error a correct consumer must raise.

Rules (DESIGN §1, §5; the reference PR): a physical trace is a maximal run of calls whose prompt
extends the previous call's prompt + sampled ids. With a contract, the agent's declarations say
where traces start, and each is checked against the tokens both ways: a declared append must
extend (else `append_declaration_mismatch`), a declared boundary must not (else
`boundary_without_rewrite`), and media inside a trace must extend too (`media_continuity`).
Without a contract every call must extend the previous one (`undeclared_discontinuity` at the
first divergent turn). Per-call evidence is checked first, over every call, before any relation
between calls: equal sampled/logprob counts (`token_logprob_length_mismatch`) and vLLM route
packing of prompt + sampled rows, at most one surplus (`routed_experts_shape`).

Adversarial mutations (`compactsim.scenarios.mutations`) are predicted from the unmutated truth with one
rule per mutation: its documented code, and the turn its edit lands on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from compactsim.harness.core.errors import ConfigError
from compactsim.harness.core.expectations import ExpectedError
from compactsim.harness.oracle.truth import CallTruth, RolloutTruth
from compactsim.scenarios.mutations import MUTATIONS_BY_NAME

#: 0.7.0 shapes carry `schema_version` (the only ones `unknown_schema_version` can edit).
SCHEMA_VERSIONED_FLAVOURS = frozenset({"gym-0.7.0-transport", "gym-0.7.0-full", "osworld"})


@dataclass(frozen=True, slots=True, eq=False)
class TraceTruth:
    """One expected physical trace: its calls, in order, and why it starts."""

    index: int
    calls: tuple[CallTruth, ...]
    start_reason: str

    @property
    def last(self) -> CallTruth:
        return self.calls[-1]

    @property
    def num_tokens(self) -> int:
        return self.last.num_tokens

    @property
    def num_sampled_tokens(self) -> int:
        return sum(len(c.sampled) for c in self.calls)


@dataclass(frozen=True, slots=True, eq=False)
class PlanTruth:
    """The expected plan of one rollout: traces when it is valid, else the error (and no traces)."""

    truth: RolloutTruth
    traces: tuple[TraceTruth, ...]
    error: ExpectedError | None

    @property
    def path(self) -> str | None:
        if self.error is not None:
            return None
        return "physical" if len(self.traces) > 1 else "single"


def _extends(prefix: Sequence, seq: Sequence) -> bool:
    return len(seq) >= len(prefix) and tuple(seq[: len(prefix)]) == tuple(prefix)


# ---------------------------------------------------------------------------------------------- evidence checks


def _route_problem(call: CallTruth, layout: tuple[int, int] | None) -> tuple[str | None, tuple[int, int] | None]:
    """(problem or None, the layout after this call)."""
    r = call.routes
    if r is None:
        return None, layout
    if r.dtype == object or r.ndim != 3 or r.shape[1] < 1 or r.shape[2] < 1:
        return f"routed_experts is not [tokens, layers, topk] (shape {list(r.shape)})", layout
    valid = call.num_tokens
    if not valid <= r.shape[0] <= valid + 1:
        return f"routed_experts has {r.shape[0]} rows for {valid} tokens (at most one surplus row)", layout
    neg = r < 0
    if bool((neg.any(axis=2) & ~neg.all(axis=2)).any()):
        return "a route row is partly -1", layout
    this = (int(r.shape[1]), int(r.shape[2]))
    if layout is not None and this != layout:
        return f"[layers, topk]={list(this)} differs from earlier calls' {list(layout)}", layout
    return None, this


def evidence_error(truth: RolloutTruth) -> ExpectedError | None:
    """The first contract error of honest-or-faulty evidence (None when it is valid)."""
    rid = truth.rollout_id
    layout: tuple[int, int] | None = None
    for call in truth.calls:  # per-call evidence first, over every call
        if len(call.sampled) != len(call.logprobs):
            return ExpectedError("token_logprob_length_mismatch", rid, call.turn_id)
        if truth.has_contract and any(m not in truth.media for m in call.media_ids):
            return ExpectedError("unknown_media_asset", rid, call.turn_id)
        problem, layout = _route_problem(call, layout)
        if problem is not None:
            return ExpectedError("routed_experts_shape", rid, call.turn_id)
    calls = truth.calls
    if truth.has_contract and calls:
        first = calls[0]
        if first.declared_append:
            return ExpectedError("append_declaration_mismatch", rid, first.turn_id)
        if first.compaction_event_id is not None:
            return ExpectedError("boundary_without_rewrite", rid, first.turn_id)
    for prev, call in zip(calls, calls[1:]):
        continues = _extends(prev.context, call.prompt)
        if not truth.has_contract:
            if not continues:
                return ExpectedError("undeclared_discontinuity", rid, call.turn_id)
            continue
        boundary = call.compaction_event_id is not None
        if continues:
            if boundary:
                return ExpectedError("boundary_without_rewrite", rid, call.turn_id)
            if not call.declared_append:
                return ExpectedError("append_declaration_mismatch", rid, call.turn_id)
            if not _extends(prev.media_ids, call.media_ids):
                return ExpectedError("media_continuity", rid, call.turn_id)
        elif call.declared_append:
            return ExpectedError("append_declaration_mismatch", rid, call.turn_id)
        elif not boundary:
            return ExpectedError("undeclared_discontinuity", rid, call.turn_id)
    if not truth.has_contract and not calls:
        return ExpectedError("missing_token_evidence", rid, None)
    return None


def segment(truth: RolloutTruth) -> tuple[TraceTruth, ...]:
    """Traces of valid evidence: a new one at every declared boundary (never without a contract)."""
    traces: list[list[CallTruth]] = []
    reasons: list[str] = []
    for k, call in enumerate(truth.calls):
        if k == 0 or (truth.has_contract and call.compaction_event_id is not None):
            traces.append([])
            reasons.append("rollout_start" if k == 0 else "declared_boundary")
        traces[-1].append(call)
    return tuple(TraceTruth(k, tuple(cs), reasons[k]) for k, cs in enumerate(traces))


# ---------------------------------------------------------------------------------------------- mutations


def _first(calls: Sequence[CallTruth], pred: Callable[[int, CallTruth], bool], what: str, name: str) -> CallTruth:
    for k, call in enumerate(calls):
        if pred(k, call):
            return call
    raise ConfigError("invalid_config", f"mutation {name!r} needs {what}; the target rollout has none")


def _first_boundary(calls: Sequence[CallTruth], name: str) -> int:
    return _first(calls, lambda k, c: c.compaction_event_id is not None, "a declared boundary", name).turn_id


def _first_append(calls: Sequence[CallTruth], name: str) -> int:
    return _first(calls, lambda k, c: k > 0 and c.declared_append, "an append-compatible call after the first", name).turn_id


def _first_media(calls: Sequence[CallTruth], name: str) -> int:
    return _first(calls, lambda k, c: bool(c.media_ids), "a call with an image", name).turn_id


def _first_media_row_end(calls: Sequence[CallTruth], name: str) -> int:
    """The last call of the trace holding the first call with an image: images are decoded while rows are built, and a
    bad one is named at the row's last call (golden spec §7), whose prompt shows every image of its trace."""
    first = _first(calls, lambda k, c: bool(c.media_ids), "a call with an image", name)
    k = next(i for i, c in enumerate(calls) if c is first) + 1
    while k < len(calls) and calls[k].compaction_event_id is None:  # the trace runs to the next declared boundary
        k += 1
    return calls[k - 1].turn_id


def _second(calls: Sequence[CallTruth], name: str) -> int:
    if len(calls) < 2:
        raise ConfigError("invalid_config", f"mutation {name!r} needs two calls; the target rollout has {len(calls)}")
    return calls[1].turn_id


#: Mutation name → the turn its documented error names (None: the error names no turn).
MUTATION_TURNS: dict[str, Callable[[Sequence[CallTruth], str], int | None]] = {
    "spoof_append_declaration": _first_boundary,  # the rewrite call now claims to append
    "drop_boundary_declaration": _first_boundary,  # the rewrite call is no longer declared
    "boundary_on_prefix_continuation": _first_append,  # a boundary on a real continuation
    "ghost_media": lambda calls, name: calls[-1].turn_id,  # the last record gains media id "ghost"
    "remove_media_asset": _first_media,  # the first image's asset is gone; its first user fails
    "swap_image_pixels": _first_media,  # the first image's pixels no longer match its digest; named at its first use
    "misfile_media_asset": _first_media,  # the first image's key holds another asset; named at its first use
    "undecodable_image": _first_media_row_end,  # the first image's bytes are no image (id and digest resealed)
    "misstate_image_dimensions": _first_media_row_end,  # the first image's declared width is off by one
    "corrupt_digest": lambda calls, name: calls[-1].turn_id,  # last call's logprob edited, digest stale
    "shift_prompt_token": _first_append,  # a resealed forgery inside a trace
    "drop_logprob": lambda calls, name: calls[-1].turn_id,  # last call loses a logprob
    "dangling_compaction_event": _first_boundary,  # the rewrite call names a missing event
    "drop_call_record": lambda calls, name: None,  # counts disagree; no single turn
    "partial_token_fields": lambda calls, name: calls[0].turn_id,  # first token item loses its logprobs
    "swap_turn_ids": _second,  # record 1 now claims the second call's turn id
    "foreign_rollout_id": lambda calls, name: calls[-1].turn_id,  # the last record names another rollout
    "surplus_route_rows": lambda calls, name: calls[0].turn_id,  # first call gets two surplus route rows
    "positive_logprob": lambda calls, name: calls[-1].turn_id,  # the last call's first logprob is above 0
    "negative_route_id": lambda calls, name: calls[0].turn_id,  # the first call's first route id is -2
    "unknown_schema_version": lambda calls, name: None,  # the whole contract is unreadable
    "reorder_trace_media": _first_append,  # media inside the first trace stop extending
}


def mutation_error(truth: RolloutTruth, name: str) -> ExpectedError:
    """The documented error of mutation `name` applied to this rollout's (valid) result."""
    mutation = MUTATIONS_BY_NAME.get(name)
    rule = MUTATION_TURNS.get(name)
    if mutation is None or rule is None:
        raise ConfigError("invalid_config", f"the oracle has no rule for mutation {name!r}; add one to MUTATION_TURNS")
    if not truth.has_contract:
        raise ConfigError("invalid_config", f"mutation {name!r} edits contract records; flavour 'none' has none")
    if name == "unknown_schema_version" and truth.flavour not in SCHEMA_VERSIONED_FLAVOURS:
        raise ConfigError("invalid_config", f"mutation {name!r} needs a 0.7.0 contract; flavour is {truth.flavour!r}")
    if not truth.calls:
        raise ConfigError("invalid_config", f"mutation {name!r} needs at least one call")
    base = evidence_error(truth)
    if base is not None:
        raise ConfigError(
            "invalid_config",
            f"mutation {name!r} targets rollout {truth.rollout_id!r}, whose evidence is already invalid "
            f"({base.code} at turn {base.turn_id}); the expected error would be ambiguous",
        )
    return ExpectedError(mutation.code, truth.rollout_id, rule(truth.calls, name))


def expected_plan(truth: RolloutTruth, *, mutation: str | None = None) -> PlanTruth:
    """Traces (valid evidence) or the error, for the rollout as the trainer receives it."""
    error = mutation_error(truth, mutation) if mutation is not None else evidence_error(truth)
    if error is not None:
        return PlanTruth(truth, (), error)
    return PlanTruth(truth, segment(truth), None)


def routes_of(call: CallTruth) -> np.ndarray | None:
    """The call's routes for its prompt + sampled tokens (a surplus final row dropped)."""
    return None if call.routes is None else call.routes[: call.num_tokens]


__all__ = [
    "MUTATION_TURNS",
    "SCHEMA_VERSIONED_FLAVOURS",
    "PlanTruth",
    "TraceTruth",
    "evidence_error",
    "expected_plan",
    "mutation_error",
    "routes_of",
    "segment",
]
