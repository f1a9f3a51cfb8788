"""The rows dump: the JSON-lines file in which any trainer writes the rows it built, its parser and a writer.

One line per training row (schema ``rows-dump``, `compactsim schema rows-dump`)::

    {"scenario": "image-compaction-k2-chunked", "step": 0, "physical_trace_id": "s0-g0-r0/trace-1",
     "logical_rollout_id": "s0-g0-r0", "parent_index": 0, "input_ids": [5, 17, 9, 42],
     "token_mask": [0, 0, 1, 1], "generation_logprobs": [0.0, 0.0, -0.51, -1.2],
     "advantages": [0.0, 0.0, 0.7, 0.7], "media_ids": ["img-3f2a"], "routed_experts_sentinel_positions": [3],
     "routed_experts": [[[0, 2]], [[1, 3]], [[2, 0]], [[-1, -1]]]}

`input_ids` are the row's unpadded tokens; `token_mask` (or `mask_spans`, half-open ``[start,
end)`` spans), `generation_logprobs`, `advantages` and the optional `routed_experts` (per token,
per MoE layer, the top-k expert ids replay feeds) have one entry per token. A padding row
has ``parent_index: -1`` and no tokens (or one pad token, with zero mask and advantage). A trainer that refuses a step writes one error line
instead of its rows: ``{"scenario": ..., "step": k, "error": {"code": ..., "rollout_id": ...,
"turn_id": ...}}``. Line order never matters. A malformed line is a `RowsDumpError` naming the
line number and the field.

The optional metrics dump (schema ``metrics-dump``) holds one line per scenario step:
``{"scenario": ..., "step": k, "metrics": {"name": value, ...}}``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from jsonschema import ValidationError
from jsonschema.exceptions import best_match

from compactsim.harness.core.contract import INT32_LIMIT
from compactsim.harness.core.json_input import InputError, json_lines, parse_json, read_text
from compactsim.harness.golden.routes_field import RoutesFieldError, parse_routes
from compactsim.harness.golden.schema import fast_check, validator

_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


class RowsDumpError(InputError):
    """A dump that is unreadable, empty, not valid JSON lines or breaks the dump's schema (`compactsim verify` exits 2)."""

    def __init__(self, source: str, line: int | None, field: str | None, problem: str, *,
                 column: int | None = None) -> None:
        super().__init__(source, line, field, problem, column=column)

    @classmethod
    def from_input_error(cls, exc: InputError) -> RowsDumpError:
        return cls(exc.source, exc.line, exc.field, exc.problem, column=exc.column)


@dataclass(frozen=True, slots=True, eq=False)
class DumpRow:
    """One row of a dump; an optional field the line omitted is None (and is not checked)."""

    line: int
    scenario: str
    step: int
    physical_trace_id: str | None
    logical_rollout_id: str | None
    parent_index: int
    input_ids: np.ndarray  # (T,) int64
    token_mask: np.ndarray  # (T,) float64, 0/1
    generation_logprobs: np.ndarray  # (T,) float64
    advantages: np.ndarray  # (T,) float64
    trace_index: int | None = None
    rollout_advantage: float | None = None
    sample_mask: float | None = None
    generation_policy_version: int | None = None
    media_ids: tuple[str, ...] | None = None
    pixel_digests: tuple[str, ...] | None = None
    sentinel_positions: tuple[int, ...] | None = None
    #: (T, layers, topk) replayed routes, or None when the line has none.
    routes: np.ndarray | None = None
    #: The line has a `generation_policy_version` key (a stated null means "unknown", which is compared).
    states_version: bool = False

    @property
    def is_padding(self) -> bool:
        return self.parent_index < 0

    @property
    def length(self) -> int:
        return int(self.input_ids.shape[0])


@dataclass(frozen=True, slots=True)
class DumpError:
    """A step the trainer refused, and the error it gave."""

    line: int
    scenario: str
    step: int
    code: str
    rollout_id: str | None
    turn_id: int | None
    message: str = ""


@dataclass(frozen=True, slots=True, eq=False)
class RowsDump:
    """A parsed rows dump: its rows and its error lines (at most one per scenario)."""

    source: str
    rows: tuple[DumpRow, ...]
    errors: tuple[DumpError, ...]

    @property
    def scenarios(self) -> tuple[str, ...]:
        """Scenario names the dump mentions, sorted."""
        return tuple(sorted({r.scenario for r in self.rows} | {e.scenario for e in self.errors}))

    def rows_of(self, scenario: str) -> tuple[DumpRow, ...]:
        return tuple(r for r in self.rows if r.scenario == scenario)

    def error_of(self, scenario: str) -> DumpError | None:
        return next((e for e in self.errors if e.scenario == scenario), None)


# ---------------------------------------------------------------------------------------- parsing


def _path_text(path: Sequence[Any]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _field_of(error: ValidationError, dump: str = "rows dump") -> tuple[str, str]:
    """(field, problem) of a schema violation in a `dump` ("rows dump", "metrics dump"), worded for a person."""
    where = _path_text(list(error.absolute_path))
    instance = error.instance
    if error.validator == "required" and isinstance(instance, dict):
        missing = [k for k in error.validator_value if k not in instance]
        name = missing[0] if missing else "?"
        return (f"{where}.{name}" if where else name), "is required but missing"
    if error.validator == "additionalProperties" and isinstance(instance, dict):
        known = set(error.schema.get("properties", {}))
        extra = sorted(k for k in instance if k not in known)
        name = extra[0] if extra else "?"
        return (f"{where}.{name}" if where else name), f"is not a field of the {dump} (misspelt?)"
    if error.validator == "oneOf" and isinstance(instance, dict) and not where:
        both = "token_mask" in instance and "mask_spans" in instance
        return "token_mask", ("give token_mask or mask_spans, not both" if both
                              else "is required (or mask_spans instead)")
    return where or "<line>", error.message


def _schema_check(name: str, obj: Any, source: str, lineno: int) -> None:
    # jsonschema walks every id of a row's routes; the compiled predicate (exact: it refuses what
    # jsonschema refuses) tests types in bulk, and jsonschema then only explains a refusal
    check = fast_check(name)
    v = validator(name)
    if check(obj) if check is not None else v.is_valid(obj):
        return
    error = best_match(v.iter_errors(obj))
    assert error is not None
    field, problem = _field_of(error, name.replace("-", " "))
    raise RowsDumpError(source, lineno, field, problem)


def _json_line(text: str, source: str, lineno: int) -> Any:
    """One line as JSON, within the input limits (depth, integer digits, finite numbers)."""
    try:
        return parse_json(text, source, line_base=lineno - 1)
    except InputError as exc:
        raise RowsDumpError.from_input_error(exc) from None


def _lines(text: str) -> list[tuple[int, str]]:
    """Non-blank lines split at LF/CRLF/CR only: U+2028 or U+0085 inside a JSON string is not a line break."""
    return json_lines(text)


def _int_problem(value: Any, lo: int, hi: int) -> str:
    expected = f"{lo} or {lo + 1}" if hi == lo + 2 else f"an integer in [{lo}, {hi})"
    return f"expected {expected}, got {value!r}"


def _as_int(value: Any, lo: int, hi: int) -> int | None:
    """`value` as an int in [lo, hi), or None. JSON Schema's "integer" admits 2.0 (a trainer dumping
    `mask.float().tolist()` writes it), so integral floats count; 1e300, 2.5 and bools do not."""
    if type(value) is float and value.is_integer() and lo <= value < hi:
        return int(value)
    if type(value) is int and lo <= value < hi:
        return value
    return None


def _int(value: Any, field: str, lo: int, source: str, lineno: int, *, hi: int = INT32_LIMIT) -> int:
    """An integer field within int32 (ids, positions, steps and versions all fit, as in the Gym contract):
    a 20-digit id or 1e300 would overflow the int64 arrays the rows are compared in."""
    got = _as_int(value, lo, hi)
    if got is None:
        raise RowsDumpError(source, lineno, field, _int_problem(value, lo, hi))
    return got


def _ints(values: Sequence[Any], field: str, lo: int, source: str, lineno: int, *,
          hi: int = INT32_LIMIT) -> tuple[int, ...]:
    """`_int` of every entry of a list field, naming the first bad entry."""
    out = []
    for k, v in enumerate(values):
        got = _as_int(v, lo, hi)
        if got is None:
            raise RowsDumpError(source, lineno, f"{field}[{k}]", _int_problem(v, lo, hi))
        out.append(got)
    return tuple(out)


def _spans_mask(spans: Sequence[Sequence[Any]], n: int, source: str, lineno: int) -> np.ndarray:
    mask = np.zeros(n, dtype=np.float64)
    end_before = 0
    for k, span in enumerate(spans):
        start, end = _ints(span, f"mask_spans[{k}]", 0, source, lineno)
        if not start < end <= n:
            raise RowsDumpError(source, lineno, f"mask_spans[{k}]",
                                f"[{start}, {end}) is not a non-empty span inside the row's {n} tokens")
        if start < end_before:
            raise RowsDumpError(source, lineno, f"mask_spans[{k}]",
                                f"[{start}, {end}) overlaps or precedes the previous span (ending at {end_before})")
        mask[start:end] = 1.0
        end_before = end
    return mask


def _per_token(obj: Mapping[str, Any], name: str, n: int, source: str, lineno: int) -> np.ndarray:
    values = obj[name]
    if len(values) != n:
        raise RowsDumpError(source, lineno, name, f"has {len(values)} entries; input_ids has {n} (one per token)")
    return np.asarray(values, dtype=np.float64)


def _row(obj: Mapping[str, Any], source: str, lineno: int) -> DumpRow:
    n = len(obj["input_ids"])
    input_ids = np.asarray(_ints(obj["input_ids"], "input_ids", 0, source, lineno), dtype=np.int64)
    if "token_mask" in obj:
        _ints(obj["token_mask"], "token_mask", 0, source, lineno, hi=2)  # the schema admits 0.0 and 1.0 too
        mask = _per_token(obj, "token_mask", n, source, lineno)
    else:
        mask = _spans_mask(obj["mask_spans"], n, source, lineno)
    media = obj.get("media_ids")
    digests = obj.get("pixel_digests")
    if media is not None and digests is not None and len(digests) != len(media):
        raise RowsDumpError(source, lineno, "pixel_digests",
                            f"has {len(digests)} digests for {len(media)} media_ids (one per image)")
    sentinels = obj.get("routed_experts_sentinel_positions")
    if sentinels is not None:
        sentinels = _ints(sentinels, "routed_experts_sentinel_positions", 0, source, lineno)
        for k, p in enumerate(sentinels):
            if p >= n:
                raise RowsDumpError(source, lineno, f"routed_experts_sentinel_positions[{k}]",
                                    f"position {p} is past the row's {n} tokens")
    routes = obj.get("routed_experts")
    if routes is not None:
        try:
            routes = parse_routes(routes, n)
        except RoutesFieldError as exc:
            raise RowsDumpError(source, lineno, exc.field, exc.problem) from None
    version = obj.get("generation_policy_version")
    trace_index = obj.get("trace_index")
    return DumpRow(
        line=lineno,
        scenario=obj["scenario"],
        step=_int(obj["step"], "step", 0, source, lineno),
        physical_trace_id=obj.get("physical_trace_id"),
        logical_rollout_id=obj.get("logical_rollout_id"),
        parent_index=_int(obj["parent_index"], "parent_index", -1, source, lineno),
        input_ids=input_ids,
        token_mask=mask,
        generation_logprobs=_per_token(obj, "generation_logprobs", n, source, lineno),
        advantages=_per_token(obj, "advantages", n, source, lineno),
        trace_index=None if trace_index is None else _int(trace_index, "trace_index", -1, source, lineno),
        rollout_advantage=None if obj.get("rollout_advantage") is None else float(obj["rollout_advantage"]),
        sample_mask=None if obj.get("sample_mask") is None else float(obj["sample_mask"]),
        generation_policy_version=(None if version is None
                                   else _int(version, "generation_policy_version", 0, source, lineno)),
        media_ids=None if media is None else tuple(media),
        pixel_digests=None if digests is None else tuple(digests),
        sentinel_positions=sentinels,
        routes=routes,
        states_version="generation_policy_version" in obj,
    )


def parse_rows_dump(text: str, *, source: str = "<rows dump>") -> RowsDump:
    """Every row and error line of a dump; the first malformed line raises `RowsDumpError`."""
    rows: list[DumpRow] = []
    errors: dict[str, DumpError] = {}
    for lineno, line in _lines(text):
        obj = _json_line(line, source, lineno)
        if not isinstance(obj, dict):
            raise RowsDumpError(source, lineno, "<line>", f"expected a JSON object, got {type(obj).__name__}")
        _schema_check("rows-dump", obj, source, lineno)
        if "error" in obj:
            err = obj["error"]
            previous = errors.get(obj["scenario"])
            if previous is not None:
                raise RowsDumpError(source, lineno, "error", f"scenario {obj['scenario']!r} already has an error "
                                    f"line (line {previous.line}); a trainer stops at its first refused step")
            step = _int(obj["step"], "step", 0, source, lineno)
            turn = err.get("turn_id")
            # 0 is read (and compared: turns are 1-based, so it never matches) rather than refusing the whole dump
            turn = None if turn is None else _int(turn, "error.turn_id", 0, source, lineno)
            errors[obj["scenario"]] = DumpError(lineno, obj["scenario"], step, err["code"], err.get("rollout_id"), turn,
                                                err.get("message", ""))
        else:
            rows.append(_row(obj, source, lineno))
    for row in rows:
        refused = errors.get(row.scenario)
        if refused is not None and row.step >= refused.step:
            raise RowsDumpError(source, row.line, "step", f"scenario {row.scenario!r} refused step {refused.step} "
                                f"(line {refused.line}); it has no rows at step {row.step}")
    return RowsDump(source=source, rows=tuple(rows), errors=tuple(sorted(errors.values(), key=lambda e: e.line)))


def read_rows_dump(path: Path) -> RowsDump:
    """`parse_rows_dump` of a file (size and encoding checked by `compactsim.harness.core.json_input`)."""
    try:
        text = read_text(Path(path), what="rows dump")
    except InputError as exc:
        raise RowsDumpError.from_input_error(exc) from None
    if not text.strip():  # a trainer that ran writes at least one line; "0 steps trained" would mislead
        raise RowsDumpError(str(path), None, None, "empty rows dump: no row and no error line")
    return parse_rows_dump(text, source=str(path))


@dataclass(frozen=True, slots=True, eq=False)
class MetricsDump:
    """A parsed metrics dump: (scenario, step) → metrics, with the line each came from."""

    source: str
    values: Mapping[tuple[str, int], Mapping[str, float]]
    lines: Mapping[tuple[str, int], int]

    def get(self, scenario: str, step: int) -> Mapping[str, float]:
        """The metrics of one step ({} when the dump has no line for it)."""
        return self.values.get((scenario, step), {})


def parse_metrics_dump(text: str, *, source: str = "<metrics dump>") -> MetricsDump:
    """Every line of a metrics dump; a repeated (scenario, step) or a malformed line raises `RowsDumpError`."""
    values: dict[tuple[str, int], dict[str, float]] = {}
    lines: dict[tuple[str, int], int] = {}
    for lineno, line in _lines(text):
        obj = _json_line(line, source, lineno)
        _schema_check("metrics-dump", obj, source, lineno)
        key = (obj["scenario"], _int(obj["step"], "step", 0, source, lineno))
        if key in lines:
            raise RowsDumpError(source, lineno, "step", f"scenario {key[0]!r} step {key[1]} already has metrics "
                                f"(line {lines[key]})")
        lines[key] = lineno
        values[key] = {k: _NON_FINITE[v] if isinstance(v, str) else float(v) for k, v in obj["metrics"].items()}
    return MetricsDump(source=source, values=values, lines=lines)


def read_metrics_dump(path: Path) -> MetricsDump:
    """`parse_metrics_dump` of a file (size and encoding checked by `compactsim.harness.core.json_input`)."""
    try:
        text = read_text(Path(path), what="metrics dump")
    except InputError as exc:
        raise RowsDumpError.from_input_error(exc) from None
    if not text.strip():  # given but empty would silently check no metric at all
        raise RowsDumpError(str(path), None, None, "empty metrics dump: no metrics line")
    return parse_metrics_dump(text, source=str(path))


# ---------------------------------------------------------------------------------------- writing


def metrics_line(scenario: str, step: int, metrics: Mapping[str, Any]) -> dict[str, Any]:
    """One metrics-dump line (non-finite values as "nan"/"inf"/"-inf"; non-numeric values dropped)."""
    out: dict[str, Any] = {}
    for key in sorted(metrics):
        value = metrics[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            if isinstance(value, str) and value in _NON_FINITE:
                out[key] = value
            continue
        out[key] = _finite_or_name(float(value) if isinstance(value, float) else int(value))
    return {"scenario": scenario, "step": step, "metrics": out}


def format_dump(lines: Sequence[Mapping[str, Any]]) -> str:
    """JSON lines text of rows-dump (or metrics-dump) lines: one compact object per line.

    JSON has no NaN or infinity, and the readers refuse Python's ``NaN``/``Infinity`` spellings; so a
    metrics-dump line's non-finite metric is written as the reader's ``"nan"``/``"inf"``/``"-inf"``
    (as `metrics_line` writes it), and a non-finite number anywhere else raises `RowsDumpError`
    naming the line and field, instead of text that no reader accepts.
    """
    out: list[str] = []
    for i, line in enumerate(lines, start=1):
        obj = dict(line)
        metrics = obj.get("metrics")
        if isinstance(metrics, Mapping):
            obj["metrics"] = {k: _finite_or_name(v) for k, v in metrics.items()}
        try:
            out.append(json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n")
        except ValueError:  # json's refusal of a non-finite float; the walk (only then) names where it is
            bad = _non_finite_path(obj)
            if bad is None:
                raise
            raise RowsDumpError("<format_dump>", i, bad, "is not a finite number; a "
                                "dump's JSON has no NaN or infinity (only a metrics line's metrics may be "
                                "non-finite, written as \"nan\", \"inf\" or \"-inf\")") from None
    return "".join(out)


def _finite_or_name(value: Any) -> Any:
    """A non-finite float as the metrics dump spells it ("nan", "inf", "-inf"); anything else unchanged."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def _non_finite_path(obj: Any) -> str | None:
    """The dotted path of the first non-finite float in `obj` (document order), or None."""
    stack: list[tuple[Any, str]] = [(obj, "")]
    while stack:
        node, path = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            return path or "line"
        children: list[tuple[Any, str]] = []
        if isinstance(node, Mapping):
            children = [(v, f"{path}.{k}" if path else str(k)) for k, v in node.items()]
        elif isinstance(node, list | tuple):
            children = [(v, f"{path}[{j}]") for j, v in enumerate(node)]
        stack.extend(reversed(children))
    return None


__all__ = [
    "DumpError",
    "DumpRow",
    "MetricsDump",
    "RowsDump",
    "RowsDumpError",
    "format_dump",
    "metrics_line",
    "parse_metrics_dump",
    "parse_rows_dump",
    "read_metrics_dump",
    "read_rows_dump",
]
