"""Are committed goldens what this compactsim exports? Re-derive them and compare, file by file.

A golden directory is a function of its scenario definitions, its seed and the code (the manifest
records all three), and its manifest digests protect each file against accidents, not against an
edit that recomputes them: a metric expectation taken out of ``expectation.json``, a payload field
the rows do not depend on, or goldens exported by an older compactsim whose oracle has since been
fixed all read back cleanly and verify. Only exporting again sees them.

`check_goldens(directory)` does exactly that: it reads the directory (every check `verify` makes,
so a malformed one is the same typed error), exports the scenario definitions it holds
(``scenarios/NAME/scenario.json``, so scenarios that came from the user's own YAML files need no
catalogue) with the manifest's seed, step cap and selection into a temporary directory, and
compares the two manifests: each file's digest, then every other manifest field. Nothing in the
checked directory is written.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from compactsim.harness.golden.manifest import Manifest

#: What differs: a file whose bytes changed, one the export writes but the directory lacks, one the
#: directory holds but the export does not write, or a manifest field other than the file list.
DifferenceKind = Literal["changed", "missing", "extra", "field"]


@dataclass(frozen=True, slots=True)
class Difference:
    """One way the committed goldens differ from a fresh export (`committed`/`exported`: digests or field values)."""

    kind: DifferenceKind
    #: the file's path inside the golden directory, or the manifest field's name
    path: str
    committed: Any
    exported: Any

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.path, "committed": self.committed, "exported": self.exported}


@dataclass(frozen=True, slots=True)
class FreshnessResult:
    """The comparison of one golden directory with what this compactsim exports from the same definitions."""

    directory: Path
    scenarios: tuple[str, ...]
    files: int
    differences: tuple[Difference, ...]
    #: the `compactsim export` arguments that write these goldens again (selection, seed, step cap, --out)
    export_again: tuple[str, ...] = ()

    @property
    def current(self) -> bool:
        return not self.differences

    def to_json(self) -> dict[str, Any]:
        return {"directory": str(self.directory), "current": self.current, "scenarios": list(self.scenarios),
                "files": self.files, "differences": [d.to_json() for d in self.differences],
                "export_again": ["compactsim", "export", *self.export_again]}


def compare_manifests(committed: Manifest, exported: Manifest) -> tuple[Difference, ...]:
    """Every difference between two manifests: files in path order (changed, missing, extra), then other fields."""
    ours = {f.path: f.sha256 for f in committed.files}
    theirs = {f.path: f.sha256 for f in exported.files}
    out: list[Difference] = []
    for path in sorted(ours.keys() | theirs.keys()):
        have, want = ours.get(path), theirs.get(path)
        if have != want:
            kind: DifferenceKind = "missing" if have is None else "extra" if want is None else "changed"
            out.append(Difference(kind, path, have, want))
    a, b = committed.to_json(), exported.to_json()
    out += [Difference("field", key, a.get(key), b.get(key)) for key in sorted(a.keys() | b.keys())
            if key != "files" and a.get(key) != b.get(key)]
    return tuple(out)


def check_goldens(directory: Path, *, parallel: int = 1) -> FreshnessResult:
    """Export `directory`'s scenario definitions again and compare (see the module docstring).

    Raises what `read_golden` raises for a directory that is not valid goldens (exit 2), and
    `ConfigError` for a definition this compactsim cannot run.
    """
    from compactsim.harness.golden.export import export_goldens
    from compactsim.harness.golden.reader import read_golden
    from compactsim.scenarios.model import Scenario

    golden = read_golden(directory)
    manifest = golden.manifest
    definitions = [Scenario.model_validate(s.scenario_data()) for s in golden.scenarios]
    with tempfile.TemporaryDirectory(prefix="compactsim-goldens-") as tmp:
        fresh = export_goldens(definitions, Path(tmp) / "goldens", seed=manifest.seed, max_steps=manifest.max_steps,
                               selection=manifest.selection, parallel=parallel)
    again = list(manifest.selection or golden.names)
    if manifest.seed is not None:
        again += ["--seed", str(manifest.seed)]
    if manifest.max_steps is not None:
        again += ["--steps", str(manifest.max_steps)]
    return FreshnessResult(directory=directory, scenarios=golden.names, files=len(manifest.files),
                           differences=compare_manifests(manifest, fresh.manifest),
                           export_again=(*again, "--out", str(directory)))


__all__ = ["Difference", "DifferenceKind", "FreshnessResult", "check_goldens", "compare_manifests"]
