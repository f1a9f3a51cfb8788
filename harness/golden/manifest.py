"""A golden directory's manifest: format version, provenance, and every file with its SHA-256 digest.

``manifest.json`` sits at the root of a golden directory. It records the golden format and its
`FORMAT_VERSION` (bumped on any incompatible change), the compactsim version, the seed, the Gym
contract flavours of the payloads, each scenario's verdict, and every other file with its size,
SHA-256 digest and the schema that validates it. Two exports with the same seed and code give
byte-identical files, hence equal manifests; a reader refuses a file whose digest changed.

Golden directories come from elsewhere (a repository, an artifact store), so nothing here trusts
them: `GoldenFiles` is the only way the reader opens a golden file, and it opens only files the
manifest lists, at a relative path inside the directory, regular and size-capped, with the listed
size and digest. Every problem is one typed `InputError`/`ConfigError` naming the file (exit 2).
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compactsim.harness.core.errors import ConfigError
from compactsim.harness.core.json_input import (
    InputError,
    decode_text,
    load_json,
    max_input_bytes,
    parse_json,
    parse_json_lines,
    read_bytes,
)
from compactsim.harness.golden.codec import json_document
from compactsim.harness.golden.schema import first_error

GOLDEN_FORMAT = "compactsim-golden"
#: Version of the golden layout; readers refuse any other.
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
#: Who produced the payloads (compactsim's scripted agents emitting NeMo-Gym shapes).
PRODUCER = "compactsim-emitter"


#: One part of a golden path: what `compactsim export` writes. ASCII only and no leading dot, so
#: never ``.``, ``..``, a hidden file, a drive letter, a backslash or a lone surrogate.
_PATH_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_relative_path(path: object, source: str, field: str) -> str:
    """`path` when it is a normalised relative POSIX path of plain parts; else an `InputError` naming `field`.

    Why: golden paths are joined to the golden directory, so an absolute path or ``..`` would read
    outside it, and a character the file system cannot encode would crash the read instead.
    """
    if not isinstance(path, str) or not all(_PATH_PART.fullmatch(part) for part in path.split("/")):
        raise InputError(source, None, field, f"path {path!r} is not a relative path inside the golden directory "
                                              "(parts of letters, digits, '.', '_', '-' joined by '/'; no leading "
                                              "'/' or '.', no '..')")
    return path


def file_schema(path: str) -> str:
    """The schema that validates the golden file at `path` (for JSON lines: each line)."""
    name = path.rsplit("/", 1)[-1]
    if name == "scenario.json":
        return "scenario"
    if name == "expectation.json":
        return "expectation"
    if "/rows/" in path and name.endswith(".jsonl"):
        return "expected-rows"
    if "/payloads/" in path and name.endswith(".jsonl"):
        return "payload"
    raise ConfigError("invalid_argument", f"{path}: not a golden file (no schema describes it)")


@dataclass(frozen=True, slots=True)
class GoldenFile:
    """One file of a golden directory (path relative to the directory, POSIX separators)."""

    path: str
    sha256: str
    bytes: int
    schema: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256, "bytes": self.bytes, "schema": self.schema}


@dataclass(frozen=True, slots=True)
class ScenarioEntry:
    """One exported scenario as the manifest lists it."""

    name: str
    purpose: str
    tags: tuple[str, ...]
    seed: int
    verdict: str
    #: The expected error ({code, rollout_id, turn_id}) of a scenario that must be refused.
    error: Mapping[str, Any] | None
    steps: int
    contract_flavours: tuple[str, ...]

    @property
    def directory(self) -> str:
        return f"scenarios/{self.name}"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "purpose": self.purpose, "tags": list(self.tags), "seed": self.seed,
            "verdict": self.verdict, "error": dict(self.error) if self.error is not None else None,
            "steps": self.steps, "contract_flavours": list(self.contract_flavours), "directory": self.directory,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ScenarioEntry:
        return cls(name=data["name"], purpose=data["purpose"], tags=tuple(data["tags"]), seed=data["seed"],
                   verdict=data["verdict"], error=data["error"], steps=data["steps"],
                   contract_flavours=tuple(data["contract_flavours"]))


@dataclass(frozen=True, slots=True)
class Manifest:
    """The parsed ``manifest.json``."""

    compactsim_version: str
    seed: int | None
    max_steps: int | None
    contract_flavours: tuple[str, ...]
    selection: tuple[str, ...]
    scenarios: tuple[ScenarioEntry, ...]
    files: tuple[GoldenFile, ...]
    format_version: int = FORMAT_VERSION
    producer: str = PRODUCER

    def scenario(self, name: str) -> ScenarioEntry:
        for entry in self.scenarios:
            if entry.name == name:
                return entry
        raise ConfigError("invalid_argument", f"no scenario {name!r} in the goldens; they hold "
                          f"{', '.join(e.name for e in self.scenarios) or 'none'}")

    def to_json(self) -> dict[str, Any]:
        return {
            "format": GOLDEN_FORMAT,
            "format_version": self.format_version,
            "compactsim_version": self.compactsim_version,
            "seed": self.seed,
            "max_steps": self.max_steps,
            "gym": {"producer": self.producer, "contract_flavours": list(self.contract_flavours)},
            "selection": list(self.selection),
            "scenarios": [s.to_json() for s in self.scenarios],
            "files": [f.to_json() for f in self.files],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Manifest:
        return cls(
            compactsim_version=data["compactsim_version"],
            seed=data["seed"],
            max_steps=data["max_steps"],
            contract_flavours=tuple(data["gym"]["contract_flavours"]),
            selection=tuple(data["selection"]),
            scenarios=tuple(ScenarioEntry.from_json(s) for s in data["scenarios"]),
            files=tuple(GoldenFile(**f) for f in data["files"]),
            format_version=data["format_version"],
            producer=data["gym"]["producer"],
        )

    def encode(self) -> bytes:
        return json_document(self.to_json())


def compactsim_version() -> str:
    """The installed compactsim version ("unknown" when running from an uninstalled tree)."""
    from importlib import metadata

    try:
        return metadata.version("compactsim")
    except metadata.PackageNotFoundError:
        return "unknown"


def build_manifest(
    files: Mapping[str, bytes],
    scenarios: Sequence[ScenarioEntry],
    *,
    seed: int | None,
    max_steps: int | None,
    selection: Sequence[str],
    version: str | None = None,
) -> Manifest:
    """The manifest of `files` (path → bytes), listed in path order with their digests."""
    listed = tuple(
        GoldenFile(path=p, sha256=sha256_hex(files[p]), bytes=len(files[p]), schema=file_schema(p)) for p in sorted(files)
    )
    return Manifest(
        compactsim_version=version if version is not None else compactsim_version(),
        seed=seed,
        max_steps=max_steps,
        contract_flavours=tuple(sorted({f for s in scenarios for f in s.contract_flavours})),
        selection=tuple(selection),
        scenarios=tuple(scenarios),
        files=listed,
    )


def read_manifest(directory: Path) -> Manifest:
    """The manifest of a golden directory, checked against its schema, format version and path rules."""
    path = Path(directory) / MANIFEST
    if not os.path.lexists(path):
        raise ConfigError("invalid_argument", f"{directory}: not a golden directory (no {MANIFEST}); "
                          "write one with `compactsim export --out DIR`")
    data = load_json(path, what="golden manifest")  # regular file, size, depth and number limits
    if isinstance(data, dict) and data.get("format") == GOLDEN_FORMAT and data.get("format_version") != FORMAT_VERSION:
        raise ConfigError("unsupported_config", f"{path}: golden format_version {data.get('format_version')!r}; this "
                          f"compactsim reads format_version {FORMAT_VERSION} (re-export with this version)")
    error = first_error("manifest", data)
    if error is not None:
        where = "/".join(map(str, error.absolute_path)) or "<root>"
        raise ConfigError("invalid_argument", f"{path}: not a valid golden manifest at {where}: {error.message}")
    _check_names_and_paths(data, str(path))
    return Manifest.from_json(data)


def _check_names_and_paths(data: Mapping[str, Any], source: str) -> None:
    """Scenario names and file paths the reader will join to the directory: plain, unique, as exported.

    The schema only says they are strings; a name like ``../x`` or a path like ``/etc/passwd``
    would make the reader open files outside the golden directory.
    """
    names: set[str] = set()
    for k, s in enumerate(data["scenarios"]):
        name = check_relative_path(s["name"], source, f"scenarios[{k}].name")
        if "/" in name or name in names:
            why = "listed twice" if name in names else "contains '/'"
            raise InputError(source, None, f"scenarios[{k}].name", f"scenario name {name!r} {why}")
        if s["directory"] != f"scenarios/{name}":
            raise InputError(source, None, f"scenarios[{k}].directory", f"{s['directory']!r}: expected "
                             f"'scenarios/{name}' (the directory is named after the scenario)")
        names.add(name)
    paths: set[str] = set()
    for k, f in enumerate(data["files"]):
        rel = check_relative_path(f["path"], source, f"files[{k}].path")
        if rel in paths or rel == MANIFEST:
            raise InputError(source, None, f"files[{k}].path", f"{rel!r} is listed twice" if rel in paths
                             else f"{MANIFEST} cannot list itself")
        paths.add(rel)


class GoldenFiles:
    """Read access to a golden directory's files, only as its manifest lists them.

    Each read checks that the path is listed, stays inside the directory after following symlinks,
    is a regular file within the input size cap, and has the listed size and sha256; the bytes that
    passed are the bytes returned, so a file edited after `check_files` ran is caught as well. A
    file the manifest does not list is never read: an edited golden cannot be hidden by removing
    its entry.

    `check_all` may hold the checked bytes of some files for their next read (one read and one
    digest per file for a reader that checks everything first): those are still the very bytes
    whose digest matched.
    """

    def __init__(self, directory: Path, manifest: Manifest) -> None:
        self.directory = Path(directory)
        self.manifest = manifest
        self._listed = {f.path: f for f in manifest.files}
        #: path -> bytes that passed `check_all`, handed out (once) by the next `read_bytes`
        self._held: dict[str, bytes] = {}

    def source(self, path: str) -> str:
        """How a message names the golden file at `path`."""
        return str(self.directory / path)

    def read_bytes(self, path: str) -> bytes:
        """The bytes of the listed file at `path` (relative to the directory); any problem is an `InputError`."""
        held = self._held.pop(path, None)
        if held is not None:
            return held
        source = self.source(path)
        listed = self._listed.get(path)
        if listed is None:
            raise InputError(source, None, None, f"not listed in {MANIFEST} files[] (every golden file read must be "
                                                 "listed there with its sha256); re-export instead of editing goldens")
        full = self.directory / path
        try:
            inside = full.resolve().is_relative_to(self.directory.resolve())
            st = full.stat()
        except FileNotFoundError:
            raise InputError(source, None, None, "missing") from None
        except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python < 3.13)
            raise InputError(source, None, None, f"cannot read: {getattr(exc, 'strerror', None) or exc}") from None
        if not inside:
            raise InputError(source, None, None, "is a symlink leading outside the golden directory; it is not read")
        if not stat.S_ISREG(st.st_mode):  # a FIFO would block the read, a device never end
            raise InputError(source, None, None, "is not a regular file; it is not read")
        if st.st_size != listed.bytes:
            raise InputError(source, None, None, f"{st.st_size} bytes differ from the manifest's {listed.bytes} bytes")
        if listed.bytes > max_input_bytes():
            raise InputError(source, None, None, f"the manifest lists {listed.bytes} bytes, over the input limit "
                                                 f"of {max_input_bytes()} bytes")
        data = read_bytes(full, what="golden file")  # regular files only, size-capped
        digest = sha256_hex(data)
        if len(data) != listed.bytes or digest != listed.sha256:
            raise InputError(source, None, None,
                             f"sha256 {digest[:16]}… differs from the manifest's {listed.sha256[:16]}…")
        return data

    def check_all(self, keep: Collection[str] = ()) -> list[str]:
        """``PATH: problem`` for each listed file that cannot be read as listed (`read_bytes`); empty when all can.

        The bytes of the files in `keep` that pass are held for their next `read_bytes`; `release`
        drops what is still held.
        """
        problems: list[str] = []
        for f in self.manifest.files:
            try:
                data = self.read_bytes(f.path)
            except InputError as exc:
                problems.append(f"{f.path}: {exc.problem}")
                continue
            if f.path in keep:
                self._held[f.path] = data
        return problems

    def release(self) -> None:
        """Forget the bytes `check_all` held: later reads check the file on disk again."""
        self._held.clear()

    def load_json(self, path: str) -> Any:
        """One JSON document, under the input limits of `compactsim.harness.core.json_input`."""
        source = self.source(path)
        text = decode_text(self.read_bytes(path), source)
        if not text.strip():
            raise InputError(source, None, None, "empty golden file")
        return parse_json(text, source)

    def load_json_lines(self, path: str) -> list[tuple[int, Any]]:
        """(line number, value) of each non-blank line of a JSON-lines file, under the same limits."""
        source = self.source(path)
        return parse_json_lines(decode_text(self.read_bytes(path), source), source)


def check_files(directory: Path, manifest: Manifest, *, files: GoldenFiles | None = None,
                keep: Collection[str] = ()) -> None:
    """Every listed file exists with its recorded digest (a changed golden is never audited against).

    With `files` (a `GoldenFiles` of the same directory and manifest), the bytes of the files in
    `keep` stay held there for their next read, so they are not read and hashed a second time.
    """
    files = files if files is not None else GoldenFiles(directory, manifest)
    problems = files.check_all(keep)
    if problems:
        raise ConfigError("invalid_argument", f"{directory}: {len(problems)} golden file(s) differ from "
                          f"{MANIFEST}; re-export instead of editing goldens", violations=tuple(problems))


__all__ = [
    "FORMAT_VERSION",
    "GOLDEN_FORMAT",
    "MANIFEST",
    "PRODUCER",
    "GoldenFile",
    "GoldenFiles",
    "Manifest",
    "ScenarioEntry",
    "build_manifest",
    "check_files",
    "check_relative_path",
    "compactsim_version",
    "file_schema",
    "read_manifest",
    "sha256_hex",
]
