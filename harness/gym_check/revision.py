"""A Gym revision named on the command line: parse the SPEC, fetch it, and fingerprint it."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path
from typing import Literal

from compactsim.harness.gym_check.errors import GymSetupError
from compactsim.harness.gym_check.source_version import dynamic_version

SpecKind = Literal["pypi", "wheel", "source"]
#: Distributions the checker needs besides the revision itself (the "shim path", reference §7).
SHIM_DISTRIBUTIONS: tuple[str, ...] = ("pydantic", "openai")
#: What a source checkout without a pyproject.toml gets (the pins of nemo-gym 0.7.0).
DEFAULT_SHIM_REQUIREMENTS: tuple[str, ...] = ("pydantic", "openai==2.44.0")
#: What the revision's agent and model-server apps (SimpleAgentWithCompaction, VLLMModelWithCompaction)
#: import at runtime, found by importing both apps of nemo-gym 0.7.0 in an empty venv until they load
#: (`ray` because Gym reads its package metadata at import). Pins come from the revision's own
#: requirements; extras are dropped (no `ray[default]`, no vLLM).
RUNTIME_DISTRIBUTIONS: tuple[str, ...] = (
    "pydantic", "openai", "anthropic", "fastapi", "uvicorn", "httptools", "uvloop", "aiohttp", "orjson", "requests",
    "omegaconf", "hydra-core", "rich", "itsdangerous", "ray", "yappi", "pydot", "pandas", "scipy", "wandb",
)
_PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9][A-Za-z0-9.+!_-]*)$")
#: Files that make up a source checkout's fingerprint; everything else (caches, VCS) is ignored.
_SOURCE_SUFFIXES = (".py", ".toml", ".cfg", ".txt", ".yaml", ".yml", ".json")
_SKIP_DIRS = {".git", "__pycache__", ".venv", "venv", "node_modules", ".mypy_cache", ".pytest_cache", ".ruff_cache"}


@dataclass(frozen=True, slots=True)
class GymSpec:
    """What the user asked for: `nemo-gym==X.Y.Z`, a wheel file, or a source checkout directory."""

    kind: SpecKind
    text: str
    name: str
    version: str | None = None
    path: Path | None = None


@dataclass(frozen=True, slots=True)
class Revision:
    """A fetched revision: where its code is, its content digest, and the deps it pins."""

    spec: GymSpec
    #: `sha256:<hex>` of the wheel file, or of the source tree's files.
    digest: str
    version: str | None
    wheel: Path | None
    source: Path | None
    #: Requirement strings for `SHIM_DISTRIBUTIONS`, with the revision's own specifiers.
    requirements: tuple[str, ...]
    #: The revision's Requires-Python, if it declares one.
    requires_python: str | None
    #: Requirement strings for `RUNTIME_DISTRIBUTIONS` (the live check's agent and model-server apps).
    runtime_requirements: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "spec": self.spec.text,
            "kind": self.spec.kind,
            "name": self.spec.name,
            "version": self.version,
            "digest": self.digest,
            "requires_python": self.requires_python,
            "requirements": list(self.requirements),
        }


def parse_spec(text: str) -> GymSpec:
    """Read SPEC; an existing path wins over a pin so `./nemo_gym-0.7.0.whl` is never a pin."""
    if not text.strip():  # Path("") is the current directory
        raise GymSetupError("spec", "the spec is empty; give nemo-gym==X.Y.Z, a .whl file or a source directory")
    path = Path(text).expanduser()
    if path.exists():
        if path.is_dir():
            return GymSpec(kind="source", text=text, name=path.resolve().name, path=path.resolve())
        if path.suffix == ".whl":
            parts = path.name.split("-")
            version = parts[1] if len(parts) >= 5 else None
            return GymSpec(kind="wheel", text=text, name=parts[0].replace("_", "-"), version=version, path=path.resolve())
        raise GymSetupError("spec", f"{text!r} is a file but not a wheel (.whl)")
    match = _PIN.match(text.strip())
    if match is None:
        raise GymSetupError(
            "spec",
            f"{text!r} is neither an existing path nor a pin; give nemo-gym==X.Y.Z, a .whl file or a source directory",
        )
    return GymSpec(kind="pypi", text=text.strip(), name=match["name"], version=match["version"])


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def source_tree_digest(root: Path) -> str:
    """sha256 over (relative path, content) of the tree's source files, in sorted order."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.endswith(".egg-info"))
        for name in sorted(filenames):
            if not name.endswith(_SOURCE_SUFFIXES):
                continue
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            if not full.is_file():  # a dangling or looping symlink, a FIFO or a device named like a source file
                raise GymSetupError("spec", f"{root}: {rel} is not a readable regular file (a dangling or looping "
                                            "symlink, a pipe or a device)")
            try:
                content = full.read_bytes()
            except OSError as exc:
                raise GymSetupError("spec", f"{root}: cannot read {rel}: {exc.strerror or type(exc).__name__}") from None
            h.update(rel.encode("utf-8") + b"\0")
            h.update(content + b"\0")
    return "sha256:" + h.hexdigest()


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def shim_requirements(requires: list[str], names: tuple[str, ...] = SHIM_DISTRIBUTIONS) -> tuple[str, ...]:
    """Keep the revision's own requirement for each of `names`, dropping extras-only ones (and extras)."""
    from packaging.requirements import InvalidRequirement, Requirement  # noqa: PLC0415 - installed with matplotlib, ray and wandb

    picked: dict[str, str] = {}
    for line in requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is not None and "extra" in str(req.marker):
            continue
        name = _normalise(req.name)
        if name in names and name not in picked:
            picked[name] = f"{req.name}{req.specifier}"
    picked.setdefault("pydantic", "pydantic")  # the checker itself needs it
    if names == SHIM_DISTRIBUTIONS:
        return tuple(picked[n] for n in names if n in picked)
    return tuple(picked.get(n, n) for n in names)  # runtime: a name the revision does not pin goes unpinned


def _wheel_metadata(wheel: Path) -> tuple[str | None, list[str], str | None]:
    try:
        with zipfile.ZipFile(wheel) as zf:
            name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
            meta = HeaderParser().parsestr(zf.read(name).decode("utf-8"))
    except (OSError, zipfile.BadZipFile, StopIteration) as exc:
        raise GymSetupError("download", f"{wheel}: not a readable wheel ({exc})") from None
    return meta.get("Version"), list(meta.get_all("Requires-Dist") or []), meta.get("Requires-Python")


def _source_metadata(root: Path) -> tuple[str | None, list[str] | None, str | None]:
    pyproject = root / "pyproject.toml"
    if not pyproject.exists():
        return None, None, None
    try:
        document = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise GymSetupError("spec", f"{pyproject}: invalid TOML ({exc})") from None
    project = document.get("project", {})
    version = project.get("version")
    if version is None and "version" in project.get("dynamic", []):
        version = dynamic_version(root, document)  # NeMo-Gym's `nemo_gym.__version__`, read without importing it
    return version, list(project.get("dependencies", [])), project.get("requires-python")


def download_wheel(spec: GymSpec, downloads: Path, *, offline: bool) -> Path:
    """Fetch the pinned wheel once into the cache; later runs (and offline runs) reuse it."""
    target = downloads / f"{_normalise(spec.name)}-{spec.version}"
    existing = sorted(target.glob("*.whl")) if target.exists() else []
    if existing:
        return existing[0]
    if offline:
        raise GymSetupError("download", f"{spec.text} is not in the cache ({target}) and --offline forbids fetching it")
    target.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--ignore-requires-python", "--only-binary=:all:",
           "--disable-pip-version-check", "--no-input", "-q", "-d", str(target), spec.text]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wheels = sorted(target.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise GymSetupError("download", f"pip download {spec.text} failed (exit {proc.returncode}): {' | '.join(tail)}")
    return wheels[0]


def fetch_revision(spec: GymSpec, downloads: Path, *, offline: bool = False) -> Revision:
    """Bring the revision's code here and fingerprint it."""
    if spec.kind == "source":
        assert spec.path is not None
        version, requires, requires_python = _source_metadata(spec.path)
        reqs = shim_requirements(requires) if requires is not None else DEFAULT_SHIM_REQUIREMENTS
        runtime = shim_requirements(requires or [], RUNTIME_DISTRIBUTIONS)
        return Revision(spec, source_tree_digest(spec.path), version, None, spec.path, reqs, requires_python, runtime)
    wheel = spec.path if spec.kind == "wheel" else download_wheel(spec, downloads, offline=offline)
    assert wheel is not None
    version, requires, requires_python = _wheel_metadata(wheel)
    return Revision(spec, file_digest(wheel), version, wheel, None, shim_requirements(requires), requires_python,
                    shim_requirements(requires, RUNTIME_DISTRIBUTIONS))


__all__ = [
    "DEFAULT_SHIM_REQUIREMENTS",
    "RUNTIME_DISTRIBUTIONS",
    "SHIM_DISTRIBUTIONS",
    "GymSpec",
    "Revision",
    "SpecKind",
    "download_wheel",
    "fetch_revision",
    "file_digest",
    "parse_spec",
    "shim_requirements",
    "source_tree_digest",
]
