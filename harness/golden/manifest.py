"""A golden directory's manifest: format version, provenance, and every file with its SHA-256 digest.

``manifest.json`` sits at the root of a golden directory. It records the golden format and its
`FORMAT_VERSION` (bumped on any incompatible change), the compactsim version, the seed, the Gym
contract flavours of the payloads, each scenario's verdict, and every other file with its size,
SHA-256 digest and the schema that validates it. Two exports with the same seed and code give
byte-identical files, hence equal manifests; a reader refuses a file whose digest changed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compactsim.harness.core.errors import ConfigError
from compactsim.harness.golden.codec import json_document
from compactsim.harness.golden.schema import validator

GOLDEN_FORMAT = "compactsim-golden"
#: Version of the golden layout; readers refuse any other.
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
#: Who produced the payloads (compactsim's scripted agents emitting NeMo-Gym shapes).
PRODUCER = "compactsim-emitter"


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


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
    """The manifest of a golden directory, checked against its schema and format version."""
    path = directory / MANIFEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError("invalid_argument", f"{directory}: not a golden directory (no {MANIFEST}); "
                          "write one with `compactsim export --out DIR`") from None
    except (OSError, ValueError) as exc:
        raise ConfigError("invalid_argument", f"{path}: unreadable ({exc})") from None
    if isinstance(data, dict) and data.get("format") == GOLDEN_FORMAT and data.get("format_version") != FORMAT_VERSION:
        raise ConfigError("unsupported_config", f"{path}: golden format_version {data.get('format_version')!r}; this "
                          f"compactsim reads format_version {FORMAT_VERSION} (re-export with this version)")
    errors = sorted(validator("manifest").iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        where = "/".join(map(str, errors[0].absolute_path)) or "<root>"
        raise ConfigError("invalid_argument", f"{path}: not a valid golden manifest at {where}: {errors[0].message}")
    return Manifest.from_json(data)


def check_files(directory: Path, manifest: Manifest) -> None:
    """Every listed file exists with its recorded digest (a changed golden is never audited against)."""
    problems: list[str] = []
    for f in manifest.files:
        try:
            data = (directory / f.path).read_bytes()
        except OSError:
            problems.append(f"{f.path}: missing")
            continue
        digest = sha256_hex(data)
        if digest != f.sha256:
            problems.append(f"{f.path}: sha256 {digest[:16]}… differs from the manifest's {f.sha256[:16]}…")
    if problems:
        raise ConfigError("invalid_argument", f"{directory}: {len(problems)} golden file(s) differ from "
                          f"{MANIFEST}; re-export instead of editing goldens", violations=tuple(problems))


__all__ = [
    "FORMAT_VERSION",
    "GOLDEN_FORMAT",
    "MANIFEST",
    "PRODUCER",
    "GoldenFile",
    "Manifest",
    "ScenarioEntry",
    "build_manifest",
    "check_files",
    "compactsim_version",
    "file_schema",
    "read_manifest",
    "sha256_hex",
]
