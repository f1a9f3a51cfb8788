"""The gym-check result: `gym-check.json` (machines) and rich tables (people), rendered by pure functions."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from rich.console import Group
from rich.table import Table
from rich.text import Text

from compactsim.harness.gym_check.schema_diff import SEVERITY_ORDER, branches, describe

REPORT_FORMAT = "compactsim.gym-check/1"
Verdict = Literal["compatible", "drift", "contract_absent", "setup_failed"]
#: Envelope fields whose nested defs are the openai input union, not evidence; left out of the field table.
_NOT_EVIDENCE = frozenset({"agent_input", "seed_obs"})


class GymCheckReport(BaseModel):
    """Everything `gym-check.json` holds. `timing` is wall-clock cost and is never digested."""

    model_config = ConfigDict(extra="forbid")

    format: str = REPORT_FORMAT
    verdict: Verdict
    exit_code: int
    reason: str | None = None
    revision: dict[str, Any] = Field(default_factory=dict)
    setup: dict[str, Any] = Field(default_factory=dict)
    models: list[dict[str, Any]] = Field(default_factory=list)
    drift: list[dict[str, Any]] = Field(default_factory=list)
    blocking: list[str] = Field(default_factory=list)
    payloads: list[dict[str, Any]] = Field(default_factory=list)
    digests: list[dict[str, Any]] = Field(default_factory=list)
    live: dict[str, Any] | None = None
    #: The revision's own agent and model server over HTTP (`live_gym`), with its `wire` section.
    live_gym: dict[str, Any] | None = None
    planner: str | None = None
    timing: dict[str, float] = Field(default_factory=dict)

    @property
    def flavours(self) -> list[str]:
        return list(self.revision.get("flavours", []))


# ---------------------------------------------------------------------------------------------
# the field table


def _reachable_defs(schema: Mapping[str, Any], roots: Iterable[Any], defs: Mapping[str, Any]) -> list[str]:
    order: list[str] = []
    todo = list(roots)
    while todo:
        node = todo.pop(0)
        if isinstance(node, Mapping):
            ref = node.get("$ref")
            if isinstance(ref, str):
                name = ref.rsplit("/", 1)[-1]
                if name not in order and name in defs:
                    order.append(name)
                    todo.append(defs[name])
            todo.extend(v for k, v in node.items() if k != "$ref")
        elif isinstance(node, list):
            todo.extend(node)
    return order


def _constraints(prop: Mapping[str, Any], defs: Mapping[str, Any]) -> str:
    found = []
    for b in branches(prop, defs):
        s = b.schema
        for key, label in (("minimum", "ge"), ("exclusiveMinimum", "gt"), ("maximum", "le"), ("exclusiveMaximum", "lt"),
                           ("minLength", "min_length"), ("maxLength", "max_length"), ("minItems", "min_items"),
                           ("maxItems", "max_items"), ("pattern", "pattern")):
            if key in s:
                found.append(f"{label}={s[key]}")
        if "const" in s:
            found.append(f"const={s['const']!r}")
        elif "enum" in s and len(s["enum"]) <= 6:
            found.append("in {" + ", ".join(repr(v) for v in s["enum"]) + "}")
    return ", ".join(dict.fromkeys(found))


def model_rows(envelopes: Mapping[str, Mapping[str, Any]], classes: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One entry per evidence model (envelopes first), with every field's type, default and constraints."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for name, env in sorted(envelopes.items()):
        schema = env["schema"]
        defs = schema.get("$defs", {})
        evidence = [f for f in env["evidence_fields"] if f in schema.get("properties", {})]
        models = [(name, schema, evidence)]
        roots = [schema["properties"][f] for f in evidence if f not in _NOT_EVIDENCE]
        models += [(d, defs[d], list(defs[d].get("properties", {}))) for d in _reachable_defs(schema, roots, defs)]
        for model, model_schema, fields in models:
            if model in seen:
                continue
            seen.add(model)
            required = set(model_schema.get("required", []))
            props = model_schema.get("properties", {})
            meta = classes.get(model, {})
            extra = model_schema.get("additionalProperties")
            out.append({
                "model": model,
                "kind": meta.get("kind", "BaseModel"),
                "extra": meta.get("extra") or ("forbid" if extra is False else "allow" if extra is True else "ignore"),
                "frozen": meta.get("frozen"),
                "fields": [
                    {
                        "name": f,
                        "type": describe(props[f], defs),
                        "required": f in required,
                        "default": props[f].get("default", "<factory>" if f not in required else None),
                        "constraints": _constraints(props[f], defs),
                    }
                    for f in fields
                ],
            })
    return out


# ---------------------------------------------------------------------------------------------
# rendering


def _short(value: Any, width: int = 60) -> Text:
    """Plain text (never rich markup: types like `list[str]` must survive), cut to `width`."""
    text = value if isinstance(value, str) else repr(value)
    return Text(text if len(text) <= width else text[: width - 1] + "…")


def _row(table: Table, *cells: Any) -> None:
    table.add_row(*(c if isinstance(c, Text) else Text(str(c)) for c in cells))


def format_header(report: GymCheckReport) -> Table:
    rev, setup = report.revision, report.setup
    colour = {"compatible": "green", "drift": "red", "contract_absent": "red", "setup_failed": "yellow"}[report.verdict]
    table = Table(title="gym-check", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value", overflow="fold")
    _row(table, "verdict", Text(f"{report.verdict} (exit {report.exit_code})", style=f"bold {colour}"))
    if report.reason:
        _row(table, "reason", report.reason)
    _row(table, "revision", f"{rev.get('spec', '?')}  version {rev.get('version') or '?'}  {str(rev.get('digest', ''))[:19]}")
    if rev.get("flavours"):
        _row(table, "contract flavours", ", ".join(rev["flavours"]))
    if setup.get("interpreter"):
        _row(table, 
            "environment",
            f"Python {setup['interpreter']}{' --ignore-requires-python' if setup.get('ignore_requires_python') else ''}; "
            f"deps {setup.get('deps_source')}; import {rev.get('import_mode', '?')}; "
            f"{'cold build' if setup.get('cold') else 'cached'} venv {setup.get('venv_key')} "
            f"({setup.get('venv_bytes', 0) / 1e6:.0f} MB)",
        )
    if report.planner:
        _row(table, "planner", report.planner)
    if report.timing:
        _row(table, "cost", ", ".join(f"{k} {v:.1f} s" for k, v in report.timing.items()))
    return table


def format_models(report: GymCheckReport) -> Table:
    table = Table(title="evidence models found in the revision", title_justify="left", show_lines=False)
    for col in ("model", "field", "type", "req", "default", "constraints"):
        table.add_column(col, overflow="fold")
    for model in report.models:
        label = f"{model['model']} ({model['kind']}, extra={model['extra']}{', frozen' if model.get('frozen') else ''})"
        for i, f in enumerate(model["fields"]):
            _row(table, label if i == 0 else "", f["name"], _short(f["type"], 70), "yes" if f["required"] else "",
                          "" if f["required"] else _short(f["default"], 24), f["constraints"])
        if not model["fields"]:
            _row(table, label, "", "", "", "", "")
    return table


def format_drift(report: GymCheckReport) -> Table:
    shown = [d for d in report.drift if d["severity"] != "info"]
    hidden = len(report.drift) - len(shown)
    title = f"contract drift against the planner ({len(shown)} shown, {hidden} info in gym-check.json)"
    table = Table(title=title, title_justify="left")
    for col in ("severity", "kind", "envelope", "path", "detail", "planner"):
        table.add_column(col, overflow="fold")
    for d in sorted(shown, key=lambda d: (-SEVERITY_ORDER[d["severity"]], d["path"])):
        style = "red" if d["severity"] == "blocking" else "yellow"
        _row(table, Text(d["severity"], style=style), d["kind"], d.get("envelope") or "", d["path"],
                      _short(d["detail"], 110), d.get("planner_verdict") or "")
    return table


def format_payloads(report: GymCheckReport) -> Table:
    table = Table(title="our payloads against the revision's models", title_justify="left")
    for col in ("payload", "flavour", "envelope", "revision says", "planner says"):
        table.add_column(col, overflow="fold")
    for p in report.payloads:
        _row(table, p["name"], p["flavour"], p.get("envelope") or "-", _short(p["revision"], 80), _short(p.get("planner") or "", 60))
    return table


def format_digests(report: GymCheckReport) -> Table:
    bad = [d for d in report.digests if d["status"] != "ok"]
    table = Table(title=f"ids and digests recomputed with the revision's functions ({len(report.digests)} checked, "
                        f"{len(bad)} differ)", title_justify="left")
    for col in ("payload", "field", "status", "declared", "revision", "ours"):
        table.add_column(col, overflow="fold")
    for d in bad[:40]:
        _row(table, d["payload"], d["field"], d["status"], _short(d["declared"], 30), _short(d["revision"], 30),
                      _short(d["ours"], 30))
    return table


def format_live(report: GymCheckReport) -> Table:
    live = report.live or {}
    table = Table(title="live: scripted rollouts through the revision's ContextCompactionSession", title_justify="left")
    for col in ("scenario", "calls", "boundaries", "plan", "rows", "ours vs real"):
        table.add_column(col, overflow="fold")
    for s in live.get("scenarios", []):
        if s.get("error"):
            _row(table, s["name"], Text(_short(s["error"], 100), style="red"), "", "", "", "")
            continue
        _row(table, 
            s["name"],
            str(len(s.get("calls", []))),
            ",".join(str(c["turn_id"]) for c in s.get("calls", []) if c.get("boundary_event_id")) or "-",
            _short(s.get("plan", ""), 60),
            _short(s.get("rows", ""), 50),
            _short(s.get("emitter", {}).get("summary", ""), 50),
        )
    return table


def format_live_gym(report: GymCheckReport) -> Group:
    """The revision's own agent and model server: one row per live scenario, then the wire table."""
    live = report.live_gym or {}
    table = Table(title="live: the revision's SimpleAgentWithCompaction + VLLMModelWithCompaction over HTTP "
                        "against compactsim serve (mocked: resources server only)", title_justify="left")
    for col in ("scenario", "rollouts", "calls", "non-200", "final answers", "audit", "ours vs Gym"):
        table.add_column(col, overflow="fold")
    for s in live.get("scenarios", []):
        if s.get("error"):
            _row(table, s["name"], Text(_short(s["error"], 100), style="red"), "", "", "", "", "")
            continue
        answers = sorted({str(a) for a in s.get("final_answers", {}).values()})
        emitter = s.get("emitter", {})
        worst = sorted(emitter.get("categories", {}).items(), key=lambda kv: -kv[1])[:2]
        ours = "identical" if emitter.get("identical") else ", ".join(f"{k} ×{v}" for k, v in worst)
        _row(table, s["name"], f"{s['completed']}/{s['rollouts']}", str(s["calls"]), str(s["retried"]),
             _short(" | ".join(answers), 40), Text(s["audit"], style="green" if s["audit"] == "passed" else "red"),
             _short(ours, 60))
    wire = Table(title="wire: what the revision sends to and reads from the model server", title_justify="left")
    for col in ("endpoint", "calls", "request fields it sends", "response fields it reads", "needed but omitted"):
        wire.add_column(col, overflow="fold")
    for ep in live.get("wire", {}).get("endpoints", []):
        reads = ", ".join(f"{r['field']}{'' if r['served'] else ' (absent)'}" for r in ep.get("revision_reads", []))
        missing = ep.get("missing_required")
        _row(wire, ep["path"], f"{ep['calls']} {ep['statuses']}", ", ".join(ep["request_fields"]), reads or "-",
             Text(", ".join(missing), style="red") if missing else ("none" if missing is not None else "-"))
    return Group(table, wire)


def format_report(report: GymCheckReport) -> Group:
    parts: list[Any] = [format_header(report)]
    if report.models:
        parts.append(format_models(report))
    if report.payloads:
        parts.append(format_payloads(report))
    shown = [d for d in report.drift if d["severity"] != "info"]
    if shown:
        parts.append(format_drift(report))
    elif report.verdict != "setup_failed":
        parts.append(Text(f"contract drift: none the planner cares about ({len(report.drift)} info findings in gym-check.json)",
                          style="green"))
    if any(d["status"] != "ok" for d in report.digests):
        parts.append(format_digests(report))
    elif report.digests:
        parts.append(Text(f"ids and digests: all {len(report.digests)} recompute identically with the revision's functions",
                          style="green"))
    if report.live is not None:
        parts.append(format_live(report))
    if report.live_gym is not None:
        parts.append(format_live_gym(report))
    if report.blocking:
        parts.append(Text("drift the planner cannot accept:\n" + "\n".join(f"  - {b}" for b in report.blocking), style="red"))
    return Group(*parts)


__all__ = [
    "REPORT_FORMAT",
    "GymCheckReport",
    "Verdict",
    "format_digests",
    "format_drift",
    "format_header",
    "format_live_gym",
    "format_live",
    "format_models",
    "format_payloads",
    "format_report",
    "model_rows",
]
