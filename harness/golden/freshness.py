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
compares the two manifests: each file's digest, then every other manifest field. Every file in the
directory that its manifest does not list (`unlisted_files`: hidden files such as ``.DS_Store``
included, no exceptions) is an ``extra`` difference too: `verify` never reads such a file, but a
trainer reading ``scenarios/NAME/`` may. Nothing in the checked directory is written.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from compactsim.harness.core.errors import ConfigError
from compactsim.harness.golden.manifest import MANIFEST, Manifest

#: What differs: a file whose bytes changed, one the export writes but the directory lacks, one the
#: directory holds but the export does not write (listed in its manifest or not), or a manifest field other
#: than the file list.
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
    #: the paths of the ``extra`` files the manifest does not list (exporting again leaves them in place)
    unlisted: tuple[str, ...] = ()

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


def _digest(path: str) -> str | None:
    """The sha256 of a regular file (read in chunks, whatever its size); None for anything else or an unreadable one."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # opening a FIFO would block
            return None
        # O_NONBLOCK: a file swapped for a FIFO after the stat still does not block the open
        with os.fdopen(os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)),
                       "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                return None
            h = hashlib.sha256()
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
            return h.hexdigest()
    except OSError:
        return None


def _shown_name(name: str) -> str:
    """A file name as text: bytes that are not UTF-8 as backslash escapes (printable, valid JSON)."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def unlisted_files(directory: Path, manifest: Manifest) -> tuple[Difference, ...]:
    """An ``extra`` difference for every entry of `directory` that is not ``manifest.json`` and not listed in its
    `files[]`, in path order: `committed` is the file's sha256 (None when it is not a regular file), `exported` None.

    Strict on purpose: hidden files (``.DS_Store``, ``.gitkeep``) count too. Directories are walked, not reported;
    a symlink to a directory is not followed, and is reported unless a listed path lies under it. A directory
    that cannot be listed is a `ConfigError` (exit 2): the check could not see everything.
    """
    listed = {f.path for f in manifest.files}
    prefixes = {p[: i + 1] for p in listed for i, c in enumerate(p) if c == "/"}
    out: list[Difference] = []

    def walk(path: str, prefix: str) -> None:
        try:
            with os.scandir(path) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            raise ConfigError("invalid_argument", f"{path}: cannot list the golden directory to find files its "
                              f"{MANIFEST} does not list: {exc.strerror or type(exc).__name__}") from None
        for entry in entries:
            rel = prefix + _shown_name(entry.name)
            try:
                real_dir = entry.is_dir(follow_symlinks=False)
                linked_dir = not real_dir and entry.is_symlink() and entry.is_dir()
            except OSError:
                real_dir = linked_dir = False
            if real_dir:
                walk(entry.path, rel + "/")
            elif linked_dir and rel + "/" in prefixes:
                continue  # listed files are read through it; `read_golden` checks they stay inside
            elif rel not in listed and rel != MANIFEST:
                out.append(Difference("extra", rel, None if linked_dir else _digest(entry.path), None))

    walk(str(directory), "")
    return tuple(sorted(out, key=lambda d: d.path))


_FILE_ORDER = {"changed": 0, "missing": 1, "extra": 2}


def _merged(differences: tuple[Difference, ...], unlisted: tuple[Difference, ...]) -> tuple[Difference, ...]:
    """File differences in path order (unlisted files among them), then the manifest fields."""
    files = sorted((d for d in (*differences, *unlisted) if d.kind != "field"),
                   key=lambda d: (d.path, _FILE_ORDER[d.kind]))
    return (*files, *(d for d in differences if d.kind == "field"))


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
    unlisted = unlisted_files(directory, manifest)  # before the export: an unlistable directory fails fast
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
                           differences=_merged(compare_manifests(manifest, fresh.manifest), unlisted),
                           export_again=(*again, "--out", str(directory)), unlisted=tuple(d.path for d in unlisted))


__all__ = ["Difference", "DifferenceKind", "FreshnessResult", "check_goldens", "compare_manifests", "unlisted_files"]
