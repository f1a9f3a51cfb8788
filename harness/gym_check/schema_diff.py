"""Contract drift: compare a Gym revision's JSON schemas (producer) with ours (consumer), field by field.

The question is one-directional: can every value the revision may emit be read by the planner?
A revision field the planner does not declare is harmless (our models keep extras) and is listed
as `info`; a field the planner declares but the revision no longer emits, a renamed field
(matched by type and position), a wider type, a looser bound or a new literal value is drift.
Each finding carries a payload transform so the runner can show the planner a payload shaped
like the revision's and let the planner's own verdict decide what is blocking.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Any, Literal

Severity = Literal["blocking", "warning", "info"]
DriftKind = Literal[
    "added",  # the revision emits a key the planner does not declare
    "removed",  # the planner declares a key the revision no longer emits
    "renamed",  # removed + added with the same type at the same position
    "type_changed",  # the revision may emit a JSON type the planner rejects
    "literal_changed",  # the revision may emit a literal value the planner rejects
    "constraint_changed",  # a bound (minimum, length, pattern, items) differs
    "unconstrained",  # the revision does not type a value the planner types
    "digest_rule",  # an id/digest recomputes differently with the revision's own functions
    "payload_rejected",  # the revision's own models reject a payload we emit
    "planner_rejected",  # the planner rejects a payload shaped like the revision's
]
SEVERITY_ORDER: dict[str, int] = {"info": 0, "warning": 1, "blocking": 2}
#: Keys of which the planner needs one, not all (a producer emits exactly one of each group).
ALTERNATIVES: tuple[frozenset[str], ...] = (
    frozenset({"context_compaction_contract", "rollout_trace_contract"}),
    frozenset({"model_call_metadata", "completion_evidence"}),
)
#: Fields our models add for compactsim's own producers; a Gym revision never emits them. None today:
#: compactsim's agents emit exactly Gym's fields in every flavour (issue 14 item 3).
COMPACTSIM_EXTENSIONS: frozenset[str] = frozenset()
#: Fields the planner still accepts from non-Gym producers, which a Gym revision never emits because
#: the trainer supplies them from its own bookkeeping: the generation version comes from the result's
#: ``trainer_policy_version`` label (Gym drops the server's ``policy_version``).
TRAINER_SUPPLIED: dict[str, str] = {"policy_version": "trainer_policy_version"}
MAX_DEPTH = 16
Path = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Drift:
    """One difference between the revision and the planner's contract."""

    kind: DriftKind
    path: str
    severity: Severity
    detail: str
    theirs: str | None = None
    ours: str | None = None
    #: How to reshape one of our payloads like the revision's (see `apply_transform`); None if n/a.
    transform: dict[str, Any] | None = None
    #: Filled by the runner: what the planner said about a payload with this drift applied.
    planner_verdict: str | None = None
    envelope: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "path": self.path,
            "severity": self.severity,
            "detail": self.detail,
            "theirs": self.theirs,
            "ours": self.ours,
            "transform": self.transform,
            "planner_verdict": self.planner_verdict,
            "envelope": self.envelope,
        }


def path_text(path: Path) -> str:
    out = ""
    for seg in path:
        out += seg if seg.startswith(("[", "{", "<")) else (("." if out else "") + seg)
    return out or "<root>"


# ---------------------------------------------------------------------------------------------
# schema normalisation


@dataclass(frozen=True, slots=True)
class _Branch:
    """One alternative of a (possibly union) schema, with `$ref`s resolved."""

    kind: str  # a JSON kind, or "any"
    schema: Mapping[str, Any]
    defs: Mapping[str, Any] = field(repr=False)

    @property
    def title(self) -> str:
        return str(self.schema.get("title", self.kind))


def _resolve(schema: Mapping[str, Any], defs: Mapping[str, Any], depth: int = 0) -> Mapping[str, Any]:
    while "$ref" in schema and depth < 64:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        extra = {k: v for k, v in schema.items() if k != "$ref"}
        schema = {**defs.get(name, {}), **extra}
        depth += 1
    if "allOf" in schema and len(schema["allOf"]) == 1:
        inner = _resolve(schema["allOf"][0], defs, depth + 1)
        schema = {**inner, **{k: v for k, v in schema.items() if k != "allOf"}}
    return schema


def _literal_kind(values: Iterable[Any]) -> str:
    kinds = set()
    for v in values:
        if v is None:
            kinds.add("null")
        elif isinstance(v, bool):
            kinds.add("boolean")
        elif isinstance(v, int):
            kinds.add("integer")
        elif isinstance(v, float):
            kinds.add("number")
        elif isinstance(v, str):
            kinds.add("string")
        else:
            kinds.add("any")
    return kinds.pop() if len(kinds) == 1 else "any"


def branches(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> list[_Branch]:
    """Flatten anyOf/oneOf and multi-type schemas into single-kind branches."""
    schema = _resolve(schema, defs)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            out: list[_Branch] = []
            for sub in schema[key]:
                out.extend(branches(sub, defs))
            return out
    kind = schema.get("type")
    if isinstance(kind, list):
        return [_Branch(k, {**schema, "type": k}, defs) for k in kind]
    if kind is None:
        if "const" in schema:
            kind = _literal_kind([schema["const"]])
        elif "enum" in schema:
            kind = _literal_kind(schema["enum"])
        elif "properties" in schema:
            kind = "object"
        else:
            kind = "any"
    return [_Branch(str(kind), schema, defs)]


def _literals(schema: Mapping[str, Any]) -> set[Any] | None:
    if "const" in schema:
        return {_hashable(schema["const"])}
    if "enum" in schema:
        return {_hashable(v) for v in schema["enum"]}
    return None


def _hashable(value: Any) -> Any:
    return repr(value) if isinstance(value, (list, dict)) else value


def describe(schema: Mapping[str, Any], defs: Mapping[str, Any], depth: int = 0) -> str:
    """A short human type: `int ≥1`, `str | None`, `list[ModelCallMetadata]`, `Literal[3]`."""
    parts = []
    for b in branches(schema, defs):
        parts.append(_describe_branch(b, depth))
    seen: list[str] = []
    for p in parts:
        if p not in seen:
            seen.append(p)
    return " | ".join(seen)


def _describe_branch(b: _Branch, depth: int) -> str:
    s = b.schema
    lits = _literals(s)
    if lits is not None:
        return "Literal[" + ", ".join(repr(v) for v in sorted(lits, key=repr)) + "]"
    names = {"null": "None", "boolean": "bool", "integer": "int", "number": "float", "string": "str", "any": "Any"}
    if b.kind in names:
        text = names[b.kind]
        bounds = []
        for key, sym in (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"), ("exclusiveMaximum", "<")):
            if key in s:
                bounds.append(f"{sym}{s[key]}")
        for key, sym in (("minLength", "len≥"), ("maxLength", "len≤")):
            if key in s:
                bounds.append(f"{sym}{s[key]}")
        if "pattern" in s:
            bounds.append(f"/{s['pattern']}/")
        return text + (" " + ",".join(bounds) if bounds else "")
    if b.kind == "array":
        if "prefixItems" in s:
            inner = ", ".join(describe(p, b.defs, depth + 1) for p in s["prefixItems"])
            return f"tuple[{inner}]"
        items = s.get("items")
        return f"list[{describe(items, b.defs, depth + 1) if items and depth < 3 else 'Any'}]"
    if b.kind == "object":
        if "properties" in s:
            return str(s.get("title", "object"))
        extra = s.get("additionalProperties")
        if isinstance(extra, Mapping) and extra and depth < 3:
            return f"dict[str, {describe(extra, b.defs, depth + 1)}]"
        return "dict"
    return b.kind


def _kind_covers(ours: str, theirs: str) -> bool:
    return ours == "any" or ours == theirs or (ours == "number" and theirs == "integer")


def _signature(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(sorted({b.kind for b in branches(schema, defs)} - {"null"}))


def _props(b: _Branch) -> dict[str, Any]:
    return dict(b.schema.get("properties", {}))


def _object_similarity(a: Mapping[str, Any], a_defs: Mapping[str, Any], b: Mapping[str, Any], b_defs: Mapping[str, Any]) -> float:
    pa = {k for br in branches(a, a_defs) if br.kind == "object" for k in _props(br)}
    pb = {k for br in branches(b, b_defs) if br.kind == "object" for k in _props(br)}
    if not pa and not pb:
        return 1.0
    return len(pa & pb) / max(1, len(pa | pb))


def _same_type(theirs: Mapping[str, Any], t_defs: Mapping[str, Any], ours: Mapping[str, Any], o_defs: Mapping[str, Any]) -> bool:
    st, so = _signature(theirs, t_defs), _signature(ours, o_defs)
    if st != so and not (set(st) <= set(so) or set(so) <= set(st)):
        return False
    if "object" in st and "object" in so:
        return _object_similarity(theirs, t_defs, ours, o_defs) >= 0.5
    return True


def placeholder(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> Any:
    """A value the revision's schema accepts, for fields our payloads lack (best effort)."""
    bs = branches(schema, defs)
    if "default" in schema:
        return schema["default"]
    b = next((x for x in bs if x.kind == "null"), bs[0])
    lits = _literals(b.schema)
    if lits:
        return sorted(lits, key=repr)[0]
    base: dict[str, Any] = {"null": None, "boolean": False, "string": "x", "array": [], "any": None}
    if b.kind in ("integer", "number"):
        lo = b.schema.get("minimum", 0)
        return lo if b.kind == "integer" else float(lo)
    if b.kind == "object":
        return {k: placeholder(v, defs) for k, v in _props(b).items() if k in set(b.schema.get("required", []))}
    return base.get(b.kind)


# ---------------------------------------------------------------------------------------------
# comparison


class _Differ:
    def __init__(self, t_defs: Mapping[str, Any], o_defs: Mapping[str, Any], *, root_evidence_fields: Iterable[str] | None):
        self.t_defs = t_defs
        self.o_defs = o_defs
        self.out: list[Drift] = []
        self.seen: set[tuple[str, str, str]] = set()
        self.root_evidence = set(root_evidence_fields) if root_evidence_fields is not None else None

    def add(self, drift: Drift) -> None:
        key = (drift.kind, drift.path, drift.detail)
        if key not in self.seen:
            self.seen.add(key)
            self.out.append(drift)

    def compare(self, theirs: Mapping[str, Any], ours: Mapping[str, Any], path: Path, *, quiet: bool = False) -> None:
        if len(path) > MAX_DEPTH:  # our models are shallow; this only stops recursive producer types
            return
        self._compare(theirs, ours, path, quiet=quiet)

    def _compare(self, theirs: Mapping[str, Any], ours: Mapping[str, Any], path: Path, *, quiet: bool) -> None:
        tb = branches(theirs, self.t_defs)
        ob = branches(ours, self.o_defs)
        if any(b.kind == "any" for b in ob):
            return
        if any(b.kind == "any" for b in tb):
            if not quiet:
                self.add(Drift("unconstrained", path_text(path), "info",
                               "the revision does not type this value; only payload checks cover it",
                               describe(theirs, self.t_defs), describe(ours, self.o_defs)))
            return
        objects_t = [b for b in tb if b.kind == "object"]
        union_of_objects = len(objects_t) > 1
        for t in tb:
            candidates = [o for o in ob if _kind_covers(o.kind, t.kind)]
            if not candidates:
                self.add(Drift("type_changed", path_text(path), "blocking",
                               f"the revision may emit {describe(t.schema, self.t_defs)} where the planner accepts "
                               f"{describe(ours, self.o_defs)}",
                               describe(theirs, self.t_defs), describe(ours, self.o_defs),
                               transform=None))
                continue
            o = next((c for c in candidates if c.kind == t.kind), candidates[0])
            sub = (*path, f"<{t.title}>") if union_of_objects and t.kind == "object" else path
            self._constraints(t, o, sub)
            if t.kind == "object":
                self._objects(t, o, sub, quiet=quiet or union_of_objects)
            elif t.kind == "array":
                self._arrays(t, o, sub, quiet=quiet)

    # -- scalars --------------------------------------------------------------------------

    def _constraints(self, t: _Branch, o: _Branch, path: Path) -> None:
        t_lits, o_lits = _literals(t.schema), _literals(o.schema)
        where = path_text(path)
        if o_lits is not None:
            if t_lits is None:
                self.add(Drift("literal_changed", where, "blocking",
                               f"the revision emits any {_describe_branch(t, 1)}; the planner accepts only "
                               f"{_describe_branch(o, 1)}", _describe_branch(t, 1), _describe_branch(o, 1),
                               transform=_set_probe(path, placeholder(t.schema, t.defs))))
            elif t_lits - o_lits:
                new = sorted(t_lits - o_lits, key=repr)
                self.add(Drift("literal_changed", where, "blocking",
                               f"the revision may emit {', '.join(map(repr, new))}; the planner accepts "
                               f"{', '.join(repr(v) for v in sorted(o_lits, key=repr))}",
                               _describe_branch(t, 1), _describe_branch(o, 1), transform=_set_probe(path, new[0])))
        for lo_key, ex_key, sign in (("minimum", "exclusiveMinimum", 1), ("maximum", "exclusiveMaximum", -1)):
            o_bound = _bound(o.schema, lo_key, ex_key)
            t_bound = _bound(t.schema, lo_key, ex_key)
            if o_bound is None:
                continue
            looser = t_bound is None or (t_bound[0] - o_bound[0]) * sign < 0 or (
                t_bound[0] == o_bound[0] and o_bound[1] and not t_bound[1]
            )
            if looser:
                probe = t_bound[0] if t_bound is not None and not t_bound[1] else o_bound[0] - sign
                self.add(Drift("constraint_changed", where, "blocking",
                               f"the revision allows {_bound_text(lo_key, t_bound)}; the planner requires "
                               f"{_bound_text(lo_key, o_bound)}", _describe_branch(t, 1), _describe_branch(o, 1),
                               transform=_set_probe(path, probe)))
            elif t_bound != o_bound:
                self.add(Drift("constraint_changed", where, "info",
                               f"the revision tightened {_bound_text(lo_key, o_bound)} to {_bound_text(lo_key, t_bound)}",
                               _describe_branch(t, 1), _describe_branch(o, 1)))
        for key, sign in (("minLength", 1), ("maxLength", -1), ("minItems", 1), ("maxItems", -1)):
            if key in o.schema and (key not in t.schema or (t.schema[key] - o.schema[key]) * sign < 0):
                self.add(Drift("constraint_changed", where, "blocking",
                               f"the revision allows {key}={t.schema.get(key, 'unbounded')}; the planner requires "
                               f"{key}={o.schema[key]}", _describe_branch(t, 1), _describe_branch(o, 1)))
        if "pattern" in o.schema and t.schema.get("pattern") != o.schema["pattern"]:
            self.add(Drift("constraint_changed", where, "warning",
                           f"pattern {t.schema.get('pattern')!r} differs from the planner's {o.schema['pattern']!r}",
                           _describe_branch(t, 1), _describe_branch(o, 1)))

    # -- arrays ---------------------------------------------------------------------------

    def _arrays(self, t: _Branch, o: _Branch, path: Path, *, quiet: bool) -> None:
        t_items, o_items = t.schema.get("items"), o.schema.get("items")
        t_prefix, o_prefix = t.schema.get("prefixItems"), o.schema.get("prefixItems")
        if o_prefix is not None:
            theirs_list = t_prefix if t_prefix is not None else [t_items or {}] * len(o_prefix)
            for i, (ts, os_) in enumerate(zip(theirs_list, o_prefix, strict=False)):
                self.compare(ts, os_, (*path, f"[{i}]"), quiet=quiet)
            if t_prefix is not None and len(t_prefix) != len(o_prefix):
                self.add(Drift("constraint_changed", path_text(path), "blocking",
                               f"tuple of {len(t_prefix)} where the planner reads {len(o_prefix)}"))
            return
        if o_items is None:
            return
        if t_prefix is not None:
            for i, ts in enumerate(t_prefix):
                self.compare(ts, o_items, (*path, f"[{i}]"), quiet=quiet)
        elif t_items is not None:
            self.compare(t_items, o_items, (*path, "[]"), quiet=quiet)

    # -- objects --------------------------------------------------------------------------

    def _objects(self, t: _Branch, o: _Branch, path: Path, *, quiet: bool) -> None:
        t_props, o_props = _props(t), _props(o)
        t_extra, o_extra = t.schema.get("additionalProperties"), o.schema.get("additionalProperties")
        if not t_props and o_props:
            if isinstance(t_extra, Mapping) and t_extra and branches(t_extra, self.t_defs)[0].kind != "any" and not quiet:
                self.add(Drift("type_changed", path_text(path), "warning",
                               "the revision emits a dict of values where the planner reads named fields",
                               describe(t.schema, self.t_defs), describe(o.schema, self.o_defs)))
            elif not quiet:
                self.add(Drift("unconstrained", path_text(path), "info",
                               "the revision types this as an open dict; only payload checks cover its fields",
                               describe(t.schema, self.t_defs), describe(o.schema, self.o_defs)))
            return
        if isinstance(o_extra, Mapping) and o_extra and isinstance(t_extra, Mapping) and t_extra:
            self.compare(t_extra, o_extra, (*path, "{}"), quiet=quiet)
        o_required = set(o.schema.get("required", []))
        t_required = set(t.schema.get("required", []))
        for name in o_props:
            if name in t_props:
                self.compare(t_props[name], o_props[name], (*path, name), quiet=quiet)
        removed = [n for n in o_props if n not in t_props]
        added = [n for n in t_props if n not in o_props]
        renames = self._match_renames(removed, added, t_props, o_props, list(t_props), list(o_props))
        for old, new in renames:
            required = old in o_required
            self.add(Drift("renamed", path_text((*path, old)), "blocking" if required else "warning",
                           f"{old!r} → {new!r} (same type and position); the planner reads {old!r}"
                           + (" and requires it" if required else " and would silently get its default"),
                           f"{new}: {describe(t_props[new], self.t_defs)}", f"{old}: {describe(o_props[old], self.o_defs)}",
                           transform={"op": "rename", "path": list(path), "from": old, "to": new}))
            self.compare(t_props[new], o_props[old], (*path, f"{old}→{new}"), quiet=True)
        renamed_old = {a for a, _ in renames}
        renamed_new = {b for _, b in renames}
        for name in removed:
            if name in renamed_old:
                continue
            group = next((g for g in ALTERNATIVES if name in g), None)
            if name in TRAINER_SUPPLIED:
                severity, why = "info", (f"not a Gym field; the trainer supplies it from its own bookkeeping "
                                         f"(the result's {TRAINER_SUPPLIED[name]!r} label)")
            elif name in COMPACTSIM_EXTENSIONS:
                severity, why = "info", "a compactsim extension; Gym never emits it"
            elif group is not None and not path and any(alt in t_props for alt in group - {name}):
                severity, why = "info", f"the revision uses the alternative {sorted(group & set(t_props))[0]!r}"
            elif group is not None and not path:
                severity, why = "blocking", f"the revision emits none of {sorted(group)}"
            elif name in o_required:
                severity, why = "blocking", "the planner requires it"
            else:
                severity, why = "warning", "optional for the planner, which would fall back to its default"
            self.add(Drift("removed", path_text((*path, name)), severity,  # type: ignore[arg-type]
                           f"the revision no longer has {name!r}; {why}", None, describe(o_props[name], self.o_defs),
                           transform={"op": "remove", "path": list(path), "key": name}))
        for name in added:
            if name in renamed_new:
                continue
            inherited = not path and self.root_evidence is not None and name not in self.root_evidence
            if o_extra is False:
                severity, why = "blocking", "the planner's model forbids unknown keys"
            else:
                severity, why = "info", "kept as an extra key; the planner does not read it"
            if quiet and severity == "info":
                continue
            label = "new required field" if name in t_required else "new optional field"
            if inherited:
                label = "inherited response field"
            self.add(Drift("added", path_text((*path, name)), severity,  # type: ignore[arg-type]
                           f"{label} {name!r}; {why}", describe(t_props[name], self.t_defs), None,
                           transform={"op": "add", "path": list(path), "key": name,
                                      "value": placeholder(t_props[name], self.t_defs)} if name in t_required else None))

    def _match_renames(
        self, removed: list[str], added: list[str], t_props: Mapping[str, Any], o_props: Mapping[str, Any],
        t_order: list[str], o_order: list[str],
    ) -> list[tuple[str, str]]:
        """Pair a removed and an added key when their types agree and they sit at the same place."""
        common = set(t_order) & set(o_order)

        def anchor(order: list[str], name: str) -> str | None:
            idx = order.index(name)
            return next((order[i] for i in range(idx - 1, -1, -1) if order[i] in common), None)

        def from_end(order: list[str], name: str) -> int:
            return len(order) - 1 - order.index(name)

        scored: list[tuple[tuple[int, int, float], str, str]] = []
        for old in removed:
            if old in COMPACTSIM_EXTENSIONS or old in TRAINER_SUPPLIED or any(old in g for g in ALTERNATIVES):
                continue
            for new in added:
                if not _same_type(t_props[new], self.t_defs, o_props[old], self.o_defs):
                    continue
                same_anchor = anchor(t_order, new) == anchor(o_order, old)
                same_end = from_end(t_order, new) == from_end(o_order, old)
                if not (same_anchor or same_end):
                    continue
                similarity = SequenceMatcher(None, old, new).ratio()
                scored.append(((0 if same_anchor and same_end else 1, 0 if same_anchor else 1, -similarity), old, new))
        pairs: list[tuple[str, str]] = []
        used_old: set[str] = set()
        used_new: set[str] = set()
        for _score, old, new in sorted(scored):
            if old not in used_old and new not in used_new:
                pairs.append((old, new))
                used_old.add(old)
                used_new.add(new)
        return pairs


def _bound(schema: Mapping[str, Any], key: str, ex_key: str) -> tuple[float, bool] | None:
    if key in schema:
        return float(schema[key]), False
    if ex_key in schema:
        return float(schema[ex_key]), True
    return None


def _bound_text(key: str, bound: tuple[float, bool] | None) -> str:
    if bound is None:
        return f"no {key}"
    value = int(bound[0]) if bound[0].is_integer() else bound[0]
    if key == "minimum":
        return f"{'>' if bound[1] else '≥'}{value}"
    return f"{'<' if bound[1] else '≤'}{value}"


def _set_probe(path: Path, value: Any) -> dict[str, Any] | None:
    """A probe sets the value on the first element reached (one instance is enough)."""
    if not path:
        return None
    parent = [("[0]" if seg == "[]" else seg) for seg in path[:-1] if not seg.startswith("<")]
    last = path[-1]
    if last.startswith(("[", "{", "<")):
        return None
    return {"op": "set", "path": parent, "key": last, "value": value}


def diff_schemas(
    theirs: Mapping[str, Any],
    ours: Mapping[str, Any],
    *,
    root: Path = (),
    evidence_fields: Iterable[str] | None = None,
    envelope: str | None = None,
) -> list[Drift]:
    """Every drift of `theirs` (the revision's JSON schema) against `ours` (the planner's)."""
    differ = _Differ(theirs.get("$defs", {}), ours.get("$defs", {}), root_evidence_fields=evidence_fields)
    differ.compare(theirs, ours, root)
    out = [d if envelope is None else _with(d, envelope=envelope) for d in differ.out]
    return sorted(out, key=lambda d: (-SEVERITY_ORDER[d.severity], d.path, d.kind))


def _with(d: Drift, **changes: Any) -> Drift:
    data = {f: getattr(d, f) for f in d.__dataclass_fields__}
    data.update(changes)
    return Drift(**data)


def token_item_members(schema: Mapping[str, Any], token_fields: Iterable[str]) -> list[tuple[str, Mapping[str, Any]]]:
    """The output-item variants of a revision envelope that carry token evidence."""
    defs = schema.get("$defs", {})
    output = schema.get("properties", {}).get("output")
    if output is None:
        return []
    items = _resolve(output, defs).get("items")
    if items is None:
        return []
    wanted = set(token_fields)
    return [
        (b.title, b.schema)
        for b in branches(items, defs)
        if b.kind == "object" and wanted <= set(_props(b))
    ]


# ---------------------------------------------------------------------------------------------
# payload transforms


def _walk(node: Any, segs: list[str]) -> list[Any]:
    """Every container reached by following `segs` from `node`."""
    if not segs:
        return [node]
    seg, rest = segs[0], segs[1:]
    if seg == "[]":
        return [x for item in (node if isinstance(node, list) else []) for x in _walk(item, rest)]
    if seg == "{}":
        return [x for item in (node.values() if isinstance(node, dict) else []) for x in _walk(item, rest)]
    if seg.startswith("[") and seg.endswith("]"):
        idx = int(seg[1:-1])
        return _walk(node[idx], rest) if isinstance(node, list) and len(node) > idx else []
    if seg.startswith("<"):
        return _walk(node, rest)
    return _walk(node[seg], rest) if isinstance(node, dict) and seg in node else []


def apply_transform(response: dict[str, Any], transform: Mapping[str, Any]) -> int:
    """Reshape a bare response in place; returns how many places changed."""
    changed = 0
    for target in _walk(response, list(transform["path"])):
        if not isinstance(target, dict):
            continue
        op = transform["op"]
        if op == "rename" and transform["from"] in target:
            target[transform["to"]] = target.pop(transform["from"])
            changed += 1
        elif op == "remove" and transform["key"] in target:
            del target[transform["key"]]
            changed += 1
        elif op == "add" and transform["key"] not in target:
            target[transform["key"]] = transform["value"]
            changed += 1
        elif op == "set" and transform["key"] in target:
            target[transform["key"]] = transform["value"]
            changed += 1
            break
    return changed


__all__ = [
    "ALTERNATIVES",
    "COMPACTSIM_EXTENSIONS",
    "TRAINER_SUPPLIED",
    "SEVERITY_ORDER",
    "Drift",
    "DriftKind",
    "Severity",
    "apply_transform",
    "branches",
    "describe",
    "diff_schemas",
    "path_text",
    "placeholder",
    "token_item_members",
]
