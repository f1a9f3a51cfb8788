"""The last known-good Gym schemas: drift is what changed since them, not what the planner checks itself.

Our contract is deliberately stricter than Gym in places (token ids are non-negative int32,
floats are finite): Gym never declared those bounds, and the planner enforces them on its own
side. Such findings already hold for the pinned baseline (nemo-gym 0.7.0), so they are reported
as `info`; only findings that are new relative to the baseline can be drift.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from compactsim.harness.gym_check.schema_diff import Drift, diff_schemas

BASELINE_DIR = Path(__file__).with_name("baselines")
DEFAULT_BASELINE = BASELINE_DIR / "nemo-gym-0.7.0.json"
#: Path segments that mean the same thing across flavours (PR #2870 renamed the contract key).
_EQUIVALENT_SEGMENTS = {"rollout_trace_contract": "context_compaction_contract"}


def pack(name: str, digest: str | None, envelopes: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """A baseline document from `inspect` envelopes, sharing one `$defs` table."""
    defs: dict[str, Any] = {}
    packed = {}
    for env_name, env in sorted(envelopes.items()):
        schema = dict(env["schema"])
        defs.update(schema.pop("$defs", {}))
        packed[env_name] = {
            "role": env["role"],
            "contract_key": env["contract_key"],
            "evidence_fields": list(env["evidence_fields"]),
            "root": schema,
        }
    return {"format": "compactsim.gym-baseline/1", "name": name, "digest": digest, "$defs": defs, "envelopes": packed}


def save(document: Mapping[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, sort_keys=True, separators=(",", ":")) + "\n", encoding="utf-8")


def load(path: Path = DEFAULT_BASELINE) -> dict[str, Any] | None:
    if not path.exists():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def envelope_schema(document: Mapping[str, Any], role: str) -> tuple[str, dict[str, Any], list[str]] | None:
    """The baseline envelope with this role (`transport`/`full`), as a self-contained schema."""
    for name, env in sorted(document.get("envelopes", {}).items()):
        if env["role"] == role:
            return name, {**env["root"], "$defs": document["$defs"]}, list(env["evidence_fields"])
    return None


def _key(drift: Drift) -> tuple[str, str, str]:
    path = drift.path
    for seg, same in _EQUIVALENT_SEGMENTS.items():
        path = path.replace(seg, same)
    return (drift.kind, path, drift.detail)


def known_findings(document: Mapping[str, Any] | None, role: str, ours: Mapping[str, Any], *, root: tuple[str, ...] = ()) -> set[tuple[str, str, str]]:
    """Findings the baseline itself already produces against our schema (the planner's own checks)."""
    if document is None:
        return set()
    found = envelope_schema(document, role)
    if found is None:
        return set()
    _name, schema, evidence = found
    return {_key(d) for d in diff_schemas(schema, ours, root=root, evidence_fields=evidence)}


def is_known(drift: Drift, known: Iterable[tuple[str, str, str]]) -> bool:
    return _key(drift) in set(known)


__all__ = ["BASELINE_DIR", "DEFAULT_BASELINE", "envelope_schema", "is_known", "known_findings", "load", "pack", "save"]
