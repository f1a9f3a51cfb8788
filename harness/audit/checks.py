"""The audit's checks: small pure functions, each comparing one aspect of a step with the oracle.

Each `check_*` returns a list of `Finding`s built through a `Reporter` (which fills in the
scenario, step and reproduction command). Row checks receive an expected row and the observed
row with the same physical trace id, so nothing depends on row order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from compactsim.harness.audit.findings import Finding
from compactsim.harness.audit.observed import BACKEND_ERROR, ObservedError, ObservedRow, ObservedStep
from compactsim.harness.core import metrics as M
from compactsim.harness.core.errors import ConfigError
from compactsim.harness.core.expectations import ExpectedError, ExpectedRollout, ExpectedRow, ExpectedStep, MetricExpectation
from compactsim.scenarios.metric_expectations import describe, passes
from compactsim.scenarios.metric_expectations import evaluate as evaluate_metrics


#: The epsilon of NeMo-RL's loss normaliser `N + 1e-8` (nemo-rl-semantics §4.6).
NORMALISER_EPSILON = 1e-8


@dataclass(frozen=True, slots=True)
class Tolerances:
    """How close floats must be: |actual − expected| <= atol + rtol·|expected|.

    Token ids, masks, media, routes and counts are always compared exactly. Logprobs and
    advantages come from the trainer's dtype (`for_dtype`); exact metrics are float64 sums.
    """

    logprob_atol: float = 0.0
    logprob_rtol: float = 1e-12
    advantage_atol: float = 1e-12
    advantage_rtol: float = 1e-12
    metric_atol: float = 1e-9
    metric_rtol: float = 1e-9
    #: The training step (oracle in float64 vs the trainer's dtype): loss and gradient norm,
    #: learning rate, and each updated parameter (|diff| <= update_atol + update_rtol·|expected update|).
    loss_atol: float = 1e-12
    loss_rtol: float = 1e-9
    grad_norm_atol: float = 1e-12
    grad_norm_rtol: float = 1e-9
    lr_rtol: float = 1e-12
    update_atol: float = 1e-12
    update_rtol: float = 1e-6
    #: A fraction of the step's learning rate added to `update_atol`. Adam divides the gradient by its own
    #: magnitude (plus eps = 1e-8), so where the true gradient is ~0 (e.g. attention key biases) rounding
    #: noise that depends on the summation order becomes an update of ~lr·noise/eps: ~1e-9·lr in float64
    #: (bound 1e-6·lr, so a trainer that merely accumulates in another order is not a finding), up to 2·lr
    #: in float32 — there `training_checks._undetermined_step` opens the bound entry by entry, where the
    #: gradient is within its own tolerance, and the flat part stays 1e-3·lr. A missing, doubled or
    #: mis-scaled update is ≥ lr on every moving parameter.
    update_lr_fraction: float = 1e-6
    #: The trainer stores its weights in its dtype: half a unit in the last place of the weight itself
    #: (2^-24 for float32, 2^-9 for bfloat16), relative to the expected weight.
    weight_rtol: float = 0.0
    #: The gradient the optimizer applied (read from its first moment) against the oracle's clipped gradient,
    #: per element: |diff| <= gradient_atol + gradient_rtol·max |expected| over that parameter tensor
    #: (+ the moments' own rounding). Relative to the tensor's largest entry, not the entry itself: where
    #: the true gradient cancels to ~0, the summation order alone decides the rounding noise left over.
    gradient_atol: float = 1e-12
    gradient_rtol: float = 1e-9
    #: And over the whole model: ‖applied − expected‖₂ <= gradient_norm_rtol·‖expected‖₂ (a wrong scale or
    #: a dropped term shows here even where low precision leaves single entries too noisy to judge).
    gradient_norm_rtol: float = 1e-9

    def for_normaliser(self, valid_tokens: float) -> Tolerances:
        """These tolerances, with room for a normaliser `N + 1e-8` held in float32, where it rounds to `N`.

        NeMo-RL divides the loss by `global_valid_toks + 1e-8` (nemo-rl-semantics §4.6), but its counts are float32
        tensors (sums of float32 sample masks), in which the 1e-8 is lost for every N ≥ 1: its loss, the loss's
        metrics, the gradient and its norm are then a relative 1e-8/N larger than the oracle's. The catalogue's
        smallest non-zero N is 20 (5e-10, inside 1e-9); a user's scenario training a handful of tokens is not.
        """
        if valid_tokens < 1:
            return self
        room = NORMALISER_EPSILON / valid_tokens
        return replace(self, loss_rtol=self.loss_rtol + room, grad_norm_rtol=self.grad_norm_rtol + room,
                       gradient_rtol=self.gradient_rtol + room, gradient_norm_rtol=self.gradient_norm_rtol + room)

    def rows_and_metrics(self) -> dict[str, float]:
        """The tolerances that apply without the training state (golden files: rows and metrics only)."""
        return {k: getattr(self, k) for k in ("advantage_atol", "advantage_rtol", "logprob_atol", "logprob_rtol",
                                              "metric_atol", "metric_rtol")}

    @classmethod
    def for_dtype(cls, dtype: str) -> Tolerances:
        """Tolerances for a batch stored in `dtype` (float64 exact up to rounding; float32, bfloat16 looser)."""
        rtol = {"float64": 1e-12, "float32": 1e-6, "bfloat16": 1e-2}.get(dtype)
        if rtol is None:
            raise ConfigError("invalid_argument", f"dtype={dtype!r}: expected float64, float32 or bfloat16")
        if dtype == "float64":
            return cls(logprob_rtol=rtol, advantage_rtol=rtol)
        # float sums of low-precision rows (advantage means, token sums) drift by the same relative amount;
        # the step itself (float64 oracle vs a float32/bfloat16 trainer) agrees to the dtype's resolution
        step = {"float32": 1e-4, "bfloat16": 5e-2}[dtype]
        return cls(logprob_rtol=rtol, advantage_rtol=rtol, advantage_atol=rtol, metric_rtol=rtol, metric_atol=rtol,
                   loss_atol=step, loss_rtol=step, grad_norm_atol=step, grad_norm_rtol=step, lr_rtol=1e-6,
                   # measured on the catalogue: float32 entries within 1e-5 of their tensor's largest, the whole
                   # gradient within 2e-6; bfloat16 entries within 0.35, the whole within 0.06
                   gradient_atol=step * 1e-3, gradient_rtol={"float32": 1e-3, "bfloat16": 4.0}[dtype],
                   gradient_norm_rtol={"float32": 1e-4, "bfloat16": 0.25}[dtype],
                   update_atol=step * 1e-2, update_rtol=step * 10,
                   # bfloat16 gradients flip Adam's sign-like step (|diff| up to 2·lr): only gross update errors show
                   update_lr_fraction={"float32": 1e-3, "bfloat16": 3.0}[dtype],
                   weight_rtol={"float32": 2.0**-24, "bfloat16": 2.0**-8}[dtype])


def close(actual: float, expected: float, atol: float, rtol: float) -> bool:
    """|actual − expected| <= atol + rtol·|expected|; NaN matches only NaN, an infinity only the same infinity
    (their difference is NaN, which no tolerance holds)."""
    if math.isnan(expected) or math.isnan(actual):
        return math.isnan(expected) and math.isnan(actual)
    if math.isinf(expected) or math.isinf(actual):
        return actual == expected
    return abs(actual - expected) <= atol + rtol * abs(expected)


@dataclass(frozen=True, slots=True)
class Reporter:
    """Builds findings for one scenario and step."""

    scenario: str
    step: int | None
    reproduce: str

    def __call__(
        self, check: str, message: str, *, expected: Any, actual: Any, row: str | None = None,
        position: int | None = None,
    ) -> Finding:
        return Finding(scenario=self.scenario, step=self.step, check=check, row=row, position=position,
                       expected=expected, actual=actual, message=message, reproduce=self.reproduce)

    def at_step(self, step: int | None) -> Reporter:
        return Reporter(self.scenario, step, self.reproduce)


# ------------------------------------------------------------------------------------ verdict


def check_error(report: Reporter, expected: ExpectedError | None, observed: ObservedError | None) -> list[Finding]:
    """The run stops with exactly the expected error (code, then rollout and turn when the oracle names them)."""
    if expected is None and observed is None:
        return []
    if observed is not None and observed.code == BACKEND_ERROR:
        return [report.at_step(observed.step)(
            "backend.error",
            f"the backend's {observed.stage} {observed.message}",
            expected="success" if expected is None else expected.code, actual=observed.message,
        )]
    if expected is None:
        assert observed is not None
        return [report.at_step(observed.step)(
            "verdict.unexpected_error",
            f"{observed.stage} raised {observed.code} for rollout {observed.rollout_id!r} turn {observed.turn_id}: "
            f"{observed.message}",
            expected="success", actual=observed.code, row=None,
        )]
    if observed is None:
        return [report(
            "verdict.expected_error",
            f"the run succeeded; it must be refused with {expected.code} (rollout {expected.rollout_id!r}, "
            f"turn {expected.turn_id})" + (f": {expected.cause}" if expected.cause else ""),
            expected=expected.to_json(), actual="success",
        )]
    rep = report.at_step(observed.step)
    if observed.code != expected.code:
        return [rep(
            "verdict.error_code",
            f"{observed.stage} raised {observed.code} ({observed.message}); expected {expected.code}",
            expected=expected.code, actual=observed.code,
        )]
    where_expected = (expected.rollout_id, expected.turn_id)
    where_actual = (
        observed.rollout_id if expected.rollout_id is not None else None,
        observed.turn_id if expected.turn_id is not None else None,
    )
    if where_actual != where_expected:
        compared = [f"rollout {expected.rollout_id!r}"] if expected.rollout_id is not None else []
        compared += [f"turn {expected.turn_id}"] if expected.turn_id is not None else []
        return [rep(
            "verdict.error_location",
            f"{expected.code} raised for rollout {observed.rollout_id!r} turn {observed.turn_id}; expected "
            + " ".join(compared) + ("" if len(compared) == 2 else " (the other location is not compared)"),
            expected={"rollout_id": expected.rollout_id, "turn_id": expected.turn_id},
            actual={"rollout_id": observed.rollout_id, "turn_id": observed.turn_id},
        )]
    return []


def check_declared_verdict(report: Reporter, declared: tuple[str, str | None, int | None],
                           derived: ExpectedError | None) -> list[Finding]:
    """The scenario's own `expect` (verdict, code, turn) agrees with what the oracle derives from it.

    The oracle decides the verdict from the scenario's script, faults, mutations and ground truth;
    an author's `expect` that disagrees is a wrong scenario (or a wrong oracle), never a pass.
    """
    verdict, code, turn = declared
    said = "success" if verdict == "success" else f"error {code}" + (f" at turn {turn}" if turn is not None else "")
    if derived is None:
        agree = verdict == "success"
        found = "success"
    else:
        agree = verdict == "error" and code == derived.code and (turn is None or turn == derived.turn_id)
        found = f"error {derived.code}" + (f" at turn {derived.turn_id}" if derived.turn_id is not None else "")
    if agree:
        return []
    because = f" ({derived.cause})" if derived is not None and derived.cause else ""
    return [report("scenario.declared_verdict",
                   f"the scenario declares expect: {said}, but its script, faults and mutations lead to {found}{because}; "
                   "fix the scenario's expect (or report an oracle bug)",
                   expected=found, actual=said)]


def check_step_count(report: Reporter, expected: int, actual: int) -> list[Finding]:
    if expected == actual:
        return []
    return [report("steps.count", f"{actual} optimizer steps trained; the scenario has {expected}",
                   expected=expected, actual=actual)]


# ------------------------------------------------------------------------------------- rows


def match_rows(
    report: Reporter, expected: Sequence[ExpectedRow], observed: ObservedStep
) -> tuple[list[tuple[ExpectedRow, ObservedRow]], list[Finding]]:
    """Pair expected and observed real rows by physical trace id; report missing, extra and duplicate rows."""
    findings: list[Finding] = []
    by_id: dict[str, ObservedRow] = {}
    for row in observed.rows:
        if row.is_padding:
            continue
        key = str(row.physical_trace_id)
        if key in by_id:
            findings.append(report("rows.duplicate", f"rows {by_id[key].row_index} and {row.row_index} both claim "
                                   f"physical trace {key!r}", expected=1, actual=2, row=key))
            continue
        by_id[key] = row
    pairs: list[tuple[ExpectedRow, ObservedRow]] = []
    wanted = {r.physical_trace_id for r in expected}
    for want in expected:
        got = by_id.get(want.physical_trace_id)
        if got is None:
            findings.append(report(
                "rows.missing",
                f"no row trains physical trace {want.physical_trace_id!r} (rollout {want.logical_rollout_id!r}, "
                f"trace {want.trace_index}, {len(want.input_ids)} tokens)",
                expected=want.physical_trace_id, actual=None, row=want.physical_trace_id,
            ))
            continue
        pairs.append((want, got))
    for key in sorted(set(by_id) - wanted):
        got = by_id[key]
        findings.append(report(
            "rows.unexpected",
            f"row {got.row_index} (rollout {got.logical_rollout_id!r}, {got.length} tokens) trains a physical "
            "trace the oracle does not expect",
            expected=None, actual=key, row=key,
        ))
    return pairs, findings


def check_row_owner(report: Reporter, want: ExpectedRow, got: ObservedRow, observed: ObservedStep) -> list[Finding]:
    """parent_indices → logical rollout, the row's logical id and its trace index all name the expected owner."""
    out: list[Finding] = []
    rid = want.physical_trace_id
    parent = got.parent_index
    parent_id = observed.logical[parent].rollout_id if 0 <= parent < len(observed.logical) else None
    if parent_id != want.logical_rollout_id:
        right = next((i for i, r in enumerate(observed.logical) if r.rollout_id == want.logical_rollout_id), None)
        hint = "" if right is None else f" (logical index {right} of the batch's canonical order)"
        out.append(report("row.owner", f"parent_indices[{got.row_index}]={parent} names rollout {parent_id!r}; "
                          f"the row belongs to {want.logical_rollout_id!r}{hint}",
                          expected=want.logical_rollout_id, actual=parent_id, row=rid))
    elif got.logical_rollout_id != want.logical_rollout_id:
        out.append(report("row.owner", f"row {got.row_index} is labelled rollout {got.logical_rollout_id!r}; "
                          f"it belongs to {want.logical_rollout_id!r}",
                          expected=want.logical_rollout_id, actual=got.logical_rollout_id, row=rid))
    if got.trace_index != want.trace_index:
        out.append(report("row.trace_index", f"row {got.row_index} has trace index {got.trace_index}",
                          expected=want.trace_index, actual=got.trace_index, row=rid))
    return out


def check_row_tokens(report: Reporter, want: ExpectedRow, got: ObservedRow) -> list[Finding]:
    """Exact token ids and length; reports the first differing position and how many differ."""
    rid = want.physical_trace_id
    exp = np.asarray(want.input_ids, dtype=np.int64)
    n = min(len(exp), got.length, got.input_ids.shape[0])
    act = np.asarray(got.input_ids[:n], dtype=np.int64)
    out: list[Finding] = []
    diff = np.flatnonzero(act != exp[:n])
    if diff.size:
        p = int(diff[0])
        out.append(report("row.tokens", f"{diff.size} of {n} token ids differ; first at position {p}",
                          expected=int(exp[p]), actual=int(act[p]), row=rid, position=p))
    if got.length != len(exp):
        out.append(report("row.length", f"row is {got.length} tokens long; the trace has {len(exp)}",
                          expected=len(exp), actual=got.length, row=rid, position=min(got.length, len(exp))))
    return out


def _expected_mask(want: ExpectedRow, size: int) -> np.ndarray:
    mask = np.zeros(size, dtype=bool)
    for start, end in want.mask_spans:
        mask[max(start, 0):min(end, size)] = True
    return mask


def check_row_mask(report: Reporter, want: ExpectedRow, got: ObservedRow) -> list[Finding]:
    """The trained positions are exactly the sampled ids of every call of the trace."""
    size = max(got.token_mask.shape[0], max((e for _, e in want.mask_spans), default=0))
    exp = _expected_mask(want, size)
    act = np.zeros(size, dtype=bool)
    act[: got.token_mask.shape[0]] = np.asarray(got.token_mask) != 0
    diff = np.flatnonzero(act != exp)
    if not diff.size:
        return []
    p = int(diff[0])
    return [report("row.mask", f"{diff.size} mask positions differ; first at position {p} "
                   f"({'trained but not sampled' if act[p] else 'sampled but not trained'})",
                   expected=int(exp[p]), actual=int(act[p]), row=want.physical_trace_id, position=p)]


def check_row_logprobs(report: Reporter, want: ExpectedRow, got: ObservedRow, tol: Tolerances) -> list[Finding]:
    """Behaviour logprob at every expected trainable position."""
    positions = want.trainable_positions
    if len(positions) != len(want.generation_logprobs):
        raise ValueError(f"expected row {want.physical_trace_id!r} has {len(positions)} trainable positions and "
                         f"{len(want.generation_logprobs)} logprobs")
    bad: list[tuple[int, float, float]] = []
    size = got.generation_logprobs.shape[0]
    for p, e in zip(positions, want.generation_logprobs, strict=True):
        a = float(got.generation_logprobs[p]) if p < size else float("nan")
        if not close(a, float(e), tol.logprob_atol, tol.logprob_rtol):
            bad.append((p, float(e), a))
    if not bad:
        return []
    p, e, a = bad[0]
    return [report("row.logprobs", f"{len(bad)} of {len(positions)} behaviour logprobs differ; first at position {p}",
                   expected=e, actual=a, row=want.physical_trace_id, position=p)]


def check_row_advantages(report: Reporter, want: ExpectedRow, got: ObservedRow, tol: Tolerances) -> list[Finding]:
    """Every trainable token carries the parent's logical advantage; every other position carries 0 or that advantage."""
    out: list[Finding] = []
    rid = want.physical_trace_id
    adv = np.asarray(got.advantages, dtype=np.float64)
    on = _expected_mask(want, adv.shape[0])
    bad = [p for p in np.flatnonzero(on).tolist()
           if not close(float(adv[p]), want.advantage, tol.advantage_atol, tol.advantage_rtol)]
    if bad:
        p = bad[0]
        out.append(report("row.advantage", f"{len(bad)} of {int(on.sum())} trainable tokens carry another advantage "
                          f"than the parent's {want.advantage!r}; first at position {p}",
                          expected=want.advantage, actual=float(adv[p]), row=rid, position=p))
    # Off the mask a position holds 0 (compactsim's rows) or the parent's advantage broadcast over the
    # whole row (NeMo-RL's `advantages.expand(mask.shape)`, nemo-rl-semantics §3.3), checked per position
    # (a row that zeroes only its padding holds both): all train the same.
    broadcast = np.asarray([close(float(v), want.advantage, tol.advantage_atol, tol.advantage_rtol) for v in adv])
    off = np.flatnonzero((~on) & (adv != 0.0) & ~broadcast) if adv.size else np.zeros(0, dtype=np.int64)
    if off.size:
        p = int(off[0])
        out.append(report("row.advantage_off_mask", f"{off.size} non-trainable positions carry an advantage that is "
                          f"neither 0 nor the parent's {want.advantage!r} (broadcast); first at position {p}",
                          expected=0.0, actual=float(adv[p]), row=rid, position=p))
    return out


def check_row_sample_mask(report: Reporter, want: ExpectedRow, got: ObservedRow) -> list[Finding]:
    if got.sample_mask == want.sample_mask:
        return []
    return [report("row.sample_mask", f"row sample_mask is {got.sample_mask}", expected=want.sample_mask,
                   actual=got.sample_mask, row=want.physical_trace_id)]


def check_row_policy_version(report: Reporter, want: ExpectedRow, got: ObservedRow) -> list[Finding]:
    if want.generation_policy_version is None or got.generation_policy_version == want.generation_policy_version:
        return []
    got_version = got.generation_policy_version if got.generation_policy_version >= 0 else None  # -1: unknown
    shown = got_version if got_version is not None else "unknown (null)"
    return [report("row.policy_version", f"row was generated at policy version {shown}",
                   expected=want.generation_policy_version, actual=got_version, row=want.physical_trace_id)]


def check_row_images(report: Reporter, want: ExpectedRow, got: ObservedRow) -> list[Finding]:
    """The row's whole image history in order (re-owned at a boundary), and the pixels behind it."""
    rid = want.physical_trace_id
    out: list[Finding] = []
    if tuple(got.media_ids) != tuple(want.media_ids):
        k = _first_difference(want.media_ids, got.media_ids)
        out.append(report(
            "row.media",
            f"image history has {len(got.media_ids)} images, expected {len(want.media_ids)}; first difference at "
            f"image {k}", expected=list(want.media_ids), actual=list(got.media_ids), row=rid, position=k,
        ))
        return out
    if want.pixel_digests and tuple(got.pixel_digests) != tuple(want.pixel_digests):
        k = _first_difference(want.pixel_digests, got.pixel_digests)
        out.append(report(
            "row.pixels", f"pixels of image {k} ({want.media_ids[k] if k < len(want.media_ids) else '?'}) differ",
            expected=want.pixel_digests[k] if k < len(want.pixel_digests) else None,
            actual=got.pixel_digests[k] if k < len(got.pixel_digests) else None, row=rid, position=k,
        ))
    return out


def _first_difference(a: Sequence[Any], b: Sequence[Any]) -> int:
    for k, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return k
    return min(len(a), len(b))


def _sentinel_at(got: ObservedRow, p: int) -> bool:
    if got.routes is None:
        return p in got.declared_sentinel_positions
    return 0 <= p < got.routes.shape[0] and bool(np.all(got.routes[p] == -1))


def check_row_routes(report: Reporter, want: ExpectedRow, got: ObservedRow, *, router_replay: bool = False) -> list[Finding]:
    """Sentinel (-1) exactly at the boundary positions, repaired placeholders, and the full routes when known.

    With router replay on and routes recorded, the row must carry its routes: a trainer that drops them
    trains without replay, and positions it merely *declares* sentinels prove nothing.
    """
    rid = want.physical_trace_id
    out: list[Finding] = []
    if router_replay and want.routes is not None and got.routes is None:
        return [report("row.routes_missing", f"router replay is on and the server recorded routes for this trace, but "
                       f"the row trained without routes ({len(want.input_ids)} tokens replayed none)",
                       expected=list(np.asarray(want.routes).shape), actual=None, row=rid)]
    sentinels = set(want.sentinel_positions)
    for p in want.sentinel_positions:
        if not _sentinel_at(got, p):
            actual = got.routes[p].tolist() if got.routes is not None and p < got.routes.shape[0] else None
            out.append(report("row.sentinel", f"boundary position {p} (last token of a non-final trace) does not "
                              "carry the all -1 route sentinel", expected=-1, actual=actual, row=rid, position=p))
    repaired_as_sentinel: set[int] = set()
    for p in want.repaired_positions:
        if p not in sentinels and _sentinel_at(got, p):
            repaired_as_sentinel.add(p)
            # without routes, the sentinel is a declaration: one finding names both facts
            what = "is declared a sentinel but is no boundary;" if got.routes is None else "carries the sentinel but"
            out.append(report("row.sentinel", f"position {p} {what} its placeholder must be repaired from the next "
                              "call's prefill", expected="repaired route", actual=-1, row=rid, position=p))
    declared = set(got.declared_sentinel_positions)
    if got.routes is None:
        for p in sorted(declared - sentinels - repaired_as_sentinel):
            out.append(report("row.sentinel", f"position {p} is declared a sentinel but is no boundary",
                              expected="route", actual=-1, row=rid, position=p))
    else:  # a row that states both: its declaration must be what its own routes say
        for p in sorted(q for q in declared - sentinels if not _sentinel_at(got, q)):  # a boundary's: reported above
            actual = got.routes[p].tolist() if 0 <= p < got.routes.shape[0] else None
            out.append(report("row.sentinel", f"position {p} is declared a sentinel, but the row's own route there "
                              f"is {actual}", expected=-1, actual=actual, row=rid, position=p))
    if want.routes is not None and got.routes is not None:
        exp = np.asarray(want.routes)
        n = min(exp.shape[0], got.routes.shape[0])
        if exp.shape[1:] != got.routes.shape[1:]:
            out.append(report("row.route", f"routes have shape {tuple(got.routes.shape[1:])} per token; expected "
                              f"{tuple(exp.shape[1:])}", expected=list(exp.shape[1:]),
                              actual=list(got.routes.shape[1:]), row=rid))
            return out
        # a token's top-k experts as a set: replay gathers each chosen expert's gate, in whatever order the ids come
        # (a routing map read back with `nonzero` sorts them), so only which experts, per token and layer, counts
        differ = np.flatnonzero(np.any((np.sort(got.routes[:n], axis=-1) != np.sort(exp[:n], axis=-1)).reshape(n, -1),
                                       axis=1))
        reported = {f.position for f in out}
        differ = np.asarray([p for p in differ.tolist() if p not in reported], dtype=np.int64)
        if differ.size:
            p = int(differ[0])
            where = (" (a call's final token: its decode placeholder must be replaced by the next call's prefill row)"
                     if p in want.repaired_positions else "")
            out.append(report("row.route", f"{differ.size} token routes differ from the generator's; first at "
                              f"position {p}{where}", expected=exp[p].tolist(), actual=got.routes[p].tolist(),
                              row=rid, position=p))
    return out


# --------------------------------------------------------------------------------- logical


def check_rollout_advantages(
    report: Reporter, rollouts: Sequence[ExpectedRollout], observed: ObservedStep, tol: Tolerances
) -> list[Finding]:
    """Each logical rollout's GRPO advantage (one value per rollout, group baseline per task)."""
    by_id = {rec.rollout_id: rec for rec in observed.logical}
    out: list[Finding] = []
    for want in rollouts:
        if want.advantage is None or want.error is not None:
            continue
        got = by_id.get(want.rollout_id)
        if got is None:
            continue  # its rows are reported missing
        if not close(got.advantage, want.advantage, tol.advantage_atol, tol.advantage_rtol):
            out.append(report("rollout.advantage", f"logical rollout {want.rollout_id!r} (group {want.group_key!r}, "
                              f"reward {want.reward}) has advantage {got.advantage!r}",
                              expected=want.advantage, actual=got.advantage))
    return out


# --------------------------------------------------------------------------------- padding


def check_padding(report: Reporter, observed: ObservedStep, expected_real_rows: int | None) -> list[Finding]:
    """Padding rows come last, weigh nothing, and make the row count exactly divisible.

    A padding row holds no token or one: NeMo-RL's trace batch writes one pad token
    (``input_lengths == 1``, zero mask, advantage and sample_mask; the PR reference's facts read
    from its code), compactsim's own batches none. Either weighs nothing; a longer one is a finding.
    """
    out: list[Finding] = []
    rows = observed.rows
    seen_padding: int | None = None
    for row in rows:
        if row.is_padding:
            if seen_padding is None:
                seen_padding = row.row_index
            got = {"mask_sum": float(np.sum(row.token_mask)), "advantage_abs_sum": float(np.sum(np.abs(row.advantages))),
                   "sample_mask": float(row.sample_mask), "length": row.length}
            if got["mask_sum"] or got["advantage_abs_sum"] or got["sample_mask"] or row.length > 1:
                out.append(report("padding.weight", f"padding row {row.row_index} has mask sum {got['mask_sum']}, "
                                  f"sample_mask {row.sample_mask}, length {row.length}",
                                  expected={"mask_sum": 0.0, "advantage_abs_sum": 0.0, "sample_mask": 0.0, "length": "0 or 1"},
                                  actual=got, position=None))
        elif seen_padding is not None:
            out.append(report("padding.order", f"real row {row.row_index} ({row.physical_trace_id!r}) follows padding "
                              f"row {seen_padding}; padding is added only after all rows are combined",
                              expected=f"padding after row {row.row_index}", actual=seen_padding,
                              row=row.physical_trace_id))
    d = observed.dp_size * observed.micro_batch_size
    if len(rows) % d:
        out.append(report("padding.divisibility", f"{len(rows)} rows are not divisible by dp_size {observed.dp_size} × "
                          f"micro_batch_size {observed.micro_batch_size}", expected=f"multiple of {d}",
                          actual=len(rows)))
    real = expected_real_rows if expected_real_rows is not None else sum(1 for r in rows if not r.is_padding)
    want_pad = (-real) % d
    got_pad = sum(1 for r in rows if r.is_padding)
    if got_pad != want_pad:
        out.append(report("padding.count", f"{got_pad} padding rows; {real} real rows need {want_pad} to reach a "
                          f"multiple of {d}", expected=want_pad, actual=got_pad))
    return out


def check_counts(report: Reporter, observed: ObservedStep) -> list[Finding]:
    """One optimizer step and one scheduler increment per logical batch, however many rows it has."""
    out: list[Finding] = []
    if observed.optimizer_steps != 1:
        out.append(report("counts.optimizer", f"{observed.optimizer_steps} optimizer steps for one logical batch of "
                          f"{sum(1 for r in observed.rows if not r.is_padding)} rows", expected=1,
                          actual=observed.optimizer_steps))
    if observed.scheduler_increments != 1:
        out.append(report("counts.scheduler", f"{observed.scheduler_increments} scheduler increments for one logical "
                          "batch", expected=1, actual=observed.scheduler_increments))
    return out


def check_cumulative_counts(report: Reporter, steps: Sequence[ObservedStep], keys: Mapping[str, str]) -> list[Finding]:
    """Counters the trainer keeps (`train/optimizer_step_count`, ...) read step + 1 after each step."""
    out: list[Finding] = []
    for check, key in keys.items():
        for k, st in enumerate(steps):
            if key in st.metrics and int(st.metrics[key]) != k + 1:
                out.append(report.at_step(st.step)(check, f"{key} is {st.metrics[key]} after step {st.step}",
                                                   expected=k + 1, actual=st.metrics[key]))
                break
    return out


# --------------------------------------------------------------------------------- metrics


#: The longest row's padding to `make_sequence_length_divisible_by` adds at most this many positions (the scenario
#: schema's cap on the divisor): a bound on S_pad from the rows alone, for `float32_logging_bound`.
_MAX_PAD_POSITIONS = 1024

#: How far, relative to its size, a quantity NeMo-RL computes or logs in float32 may be from the oracle's float64
#: value whatever the trainer's precision. Each float32 term is within 2^-24 of its value and a float32 sum of n
#: terms within about log2(n)·2^-24 of Σ|terms|; 2^-16 covers both with room and stays far below what a wrong
#: quantity moves (a masked instead of an unmasked sum, a value after instead of before clipping, a rank or a
#: rollout counted twice). Used for `advantages/*` (`float32_logging_bound`), the `reward` metric
#: (`check_reported_reward`) and the gradient norm (`training_checks`).
FLOAT32_LOGGING_RTOL = 2.0**-16


def float32_logging_bound(key: str, expected: ExpectedStep) -> float:
    """How far NeMo-RL's own logging of `key` may be from the oracle's float64 value: 0 except for `advantages/*`,
    which its driver computes from ``advantages.float()`` (nemo-rl-semantics §3.7), so a faithful trainer logs them
    with float32 rounding whatever its precision.

    `FLOAT32_LOGGING_RTOL` of Σ|terms|, which is bounded from the rows alone: S_pad ≤ the longest row +
    `_MAX_PAD_POSITIONS` positions per row for the sum, max|A| for the mean and the extrema.
    """
    if key not in (M.ADVANTAGES_SUM, M.ADVANTAGES_MEAN, M.ADVANTAGES_MIN, M.ADVANTAGES_MAX) or not expected.rows:
        return 0.0
    largest = max(abs(float(r.advantage)) for r in expected.rows)
    if key != M.ADVANTAGES_SUM:
        return FLOAT32_LOGGING_RTOL * largest
    width = max(len(r.input_ids) for r in expected.rows) + _MAX_PAD_POSITIONS
    return FLOAT32_LOGGING_RTOL * width * math.fsum(abs(float(r.advantage)) for r in expected.rows)


def check_exact_metrics(report: Reporter, expected: ExpectedStep, observed: ObservedStep, tol: Tolerances) -> list[Finding]:
    """Every batch metric the oracle computes, within the metric tolerance (`advantages/*` also within the float32
    rounding of NeMo-RL's own logging, `float32_logging_bound`)."""
    out: list[Finding] = []
    for key in sorted(expected.exact_metrics):
        want = float(expected.exact_metrics[key])
        if key not in observed.metrics:
            out.append(report("metric.missing", f"step did not report {key}", expected=want, actual=None))
            continue
        got = float(observed.metrics[key])
        if not close(got, want, tol.metric_atol, tol.metric_rtol) and not abs(got - want) <= float32_logging_bound(key, expected):
            out.append(report("metric.exact", f"{key} = {got!r}; the oracle computes {want!r}", expected=want, actual=got))
    return out


def check_reported_reward(report: Reporter, rollouts: Sequence[ExpectedRollout], metrics: Mapping[str, Any],
                          tol: Tolerances) -> list[Finding]:
    """`M.REWARD`, when the backend reports it, is the mean of the step's logical rollouts' rewards (masked ones
    included: `mask_sample` drops a rollout from the loss, not from the batch's rewards), within the metric
    tolerance or float32's (`FLOAT32_LOGGING_RTOL` of the largest |reward|): NeMo-RL's driver holds the rewards in
    a float32 tensor (``torch.tensor`` of Python floats) and logs their ``np.mean``.

    A mean over physical rows weighs a compacted rollout by its row count (and padding rows by a reward of 0):
    the dashboard then drifts the first time a step splits a rollout, though training is right.
    """
    got = metrics.get(M.REWARD)
    scored = [r for r in rollouts if r.reward is not None]
    if got is None or isinstance(got, bool) or not isinstance(got, (int, float)) or not scored:
        return []
    rewards = [float(r.reward) for r in scored]  # type: ignore[arg-type]
    want = math.fsum(rewards) / len(rewards)
    got = float(got)
    if close(got, want, tol.metric_atol, tol.metric_rtol) or abs(got - want) <= FLOAT32_LOGGING_RTOL * max(map(abs, rewards)):
        return []
    rows = [max(len(r.traces), 1) for r in scored]
    by_rows = math.fsum(w * x for w, x in zip(rows, rewards)) / sum(rows)
    why = (" (it is their mean over physical rows, which weighs a split rollout by its rows)"
           if by_rows != want and close(got, by_rows, tol.metric_atol, tol.metric_rtol) else "")
    return [report("train.metric", f"{M.REWARD} = {got!r}; the mean reward of the step's {len(rewards)} "
                                   f"logical rollouts is {want!r}{why}", expected=want, actual=got)]


def check_metric_expectations(
    report: Reporter,
    step_expectations: Sequence[tuple[int, Sequence[MetricExpectation]]],
    run_expectations: Sequence[MetricExpectation],
    steps: Sequence[tuple[int, Mapping[str, float | int]]],
) -> list[Finding]:
    """Declarative metric checks (grammar and semantics: `compactsim.scenarios.metric_expectations`).

    `step_expectations` pairs a step with the checks its `ExpectedStep` lists (those without an
    aggregate are evaluated on that step alone); `run_expectations` are evaluated once over every
    step in order (`mean(...)` reduces the series, `all(...)`/`any(...)` check each step).
    """
    out: list[Finding] = []
    metrics_of = dict(steps)
    for step, exps in step_expectations:
        if step not in metrics_of:
            continue
        plain = [e for e in exps if e.aggregate is None]
        for o in evaluate_metrics(plain, [metrics_of[step]]):
            if not o.ok:
                out.append(_metric_finding(report.at_step(step), o.expectation, o.actual, o.detail))
    ordered = [m for _, m in steps]
    ids = [k for k, _ in steps]
    for o in evaluate_metrics(list(run_expectations), ordered):
        if o.ok:
            continue
        e = o.expectation
        if e.aggregate == "all":  # name the first failing step
            bad = next(k for k, m in enumerate(ordered) if e.metric not in m or not passes(e, float(m[e.metric])))
            value = ordered[bad].get(e.metric)
            detail = f"metric missing at step {ids[bad]}" if value is None else f"{describe(e)} fails at step {ids[bad]}: got {value!r}"
            out.append(_metric_finding(report.at_step(ids[bad]), e, None if value is None else float(value), detail))
        elif e.aggregate is None:
            out.append(_metric_finding(report.at_step(ids[o.step] if o.step is not None else None), e, o.actual, o.detail))
        else:
            out.append(_metric_finding(report, e, o.actual, o.detail))
    return out


def _metric_finding(report: Reporter, e: MetricExpectation, actual: float | None, detail: str) -> Finding:
    if actual is None and "missing" in detail:
        return report("metric.missing", f"{e.metric} was not reported (needed by {describe(e)})",
                      expected=e.to_json(), actual=None)
    return report("metric.expectation", detail or f"{describe(e)} does not hold", expected=e.to_json(), actual=actual)


__all__ = [
    "FLOAT32_LOGGING_RTOL",
    "Reporter",
    "Tolerances",
    "check_counts",
    "check_cumulative_counts",
    "check_declared_verdict",
    "check_error",
    "check_exact_metrics",
    "check_metric_expectations",
    "check_padding",
    "check_reported_reward",
    "check_rollout_advantages",
    "check_row_advantages",
    "check_row_images",
    "check_row_logprobs",
    "check_row_mask",
    "check_row_owner",
    "check_row_policy_version",
    "check_row_routes",
    "check_row_sample_mask",
    "check_row_tokens",
    "check_step_count",
    "close",
    "float32_logging_bound",
    "match_rows",
]
