"""One isolated virtual environment per Gym revision, built once and cached by the revision's digest."""

from __future__ import annotations

import fcntl
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Literal

from compactsim.harness.gym_check.errors import GymSetupError
from compactsim.harness.gym_check.revision import Revision

#: Bump when the layout of a built venv changes, so old cache entries are not reused.
BUILDER_VERSION = "1"
CACHE_ENV = "COMPACTSIM_GYM_CACHE"
PYTHON_ENV = "COMPACTSIM_GYM_PYTHON"
MANIFEST = "compactsim-gym.json"
#: A Python at least this new is preferred (the 0.7.0 wheel declares Requires-Python >=3.13.14).
PREFERRED_MINOR = (3, 13)
DepsSource = Literal["index", "host"]
#: "shim": pydantic + openai for the evidence models; "runtime": what the agent and model-server apps import.
Profile = Literal["shim", "runtime"]


@dataclass(frozen=True, slots=True)
class Interpreter:
    executable: str
    version: tuple[int, int, int]

    @property
    def version_text(self) -> str:
        return ".".join(map(str, self.version))


@dataclass(frozen=True, slots=True)
class BuiltVenv:
    """A ready venv; `cold` says whether this call built it, `timing` how long each step took."""

    path: Path
    python: Path
    key: str
    interpreter: Interpreter
    deps_source: DepsSource
    ignore_requires_python: bool
    cold: bool
    bytes: int
    timing: dict[str, float] = field(default_factory=dict)
    manifest: dict[str, object] = field(default_factory=dict)


def repo_root() -> Path:
    """The checkout holding this package, else the working directory."""
    here = Path(__file__).resolve().parents[2]
    return here if (here / "pyproject.toml").exists() else Path.cwd()


def default_cache_dir() -> Path:
    """``$COMPACTSIM_GYM_CACHE``, else the user's cache (``$XDG_CACHE_HOME`` or ``~/.cache``)/compactsim/gym.

    One cache per user, shared by every checkout and installed copy (entries are keyed by the
    revision's digest and the venv layout version, so nothing stale is reused); a checkout's
    ``.gym-cache/`` when the user's cache folder cannot be created.
    """
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser().resolve()
    try:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        user = Path(base).expanduser() / "compactsim" / "gym"
        user.mkdir(parents=True, exist_ok=True)
    except (OSError, RuntimeError):  # no home directory, or a read-only one
        return repo_root() / ".gym-cache"
    return user.resolve()


def _probe_interpreter(executable: str) -> Interpreter | None:
    try:
        out = subprocess.run(
            [executable, "-I", "-c", "import sys, venv, ensurepip; print('%d.%d.%d' % sys.version_info[:3])"],
            capture_output=True, text=True, timeout=20, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    major, minor, micro = (int(x) for x in out.stdout.strip().split("."))
    return Interpreter(executable=executable, version=(major, minor, micro))


def _candidate_executables() -> list[str]:
    names = [shutil.which(f"python3.{m}") for m in range(20, 10, -1)]
    pyenv_root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    names += sorted(glob.glob(os.path.join(pyenv_root, "versions", "3.*", "bin", "python3")), reverse=True)
    seen: list[str] = []
    for name in names:
        if name and "/shims/" not in name and os.access(name, os.X_OK) and name not in seen:
            seen.append(name)
    return seen


def host_interpreter() -> Interpreter:
    base = getattr(sys, "_base_executable", None) or sys.executable
    return Interpreter(executable=base, version=tuple(sys.version_info[:3]))  # type: ignore[arg-type]


def choose_interpreter(*, deps_source: DepsSource) -> tuple[Interpreter, str]:
    """The best Python for a revision, with the reason: an override, a 3.13+, else this one.

    Host-linked deps (offline) carry compiled extensions for this interpreter, so they force it.
    """
    override = os.environ.get(PYTHON_ENV)
    if override:
        found = _probe_interpreter(override)
        if found is None:
            raise GymSetupError("interpreter", f"{PYTHON_ENV}={override} is not a working Python with venv")
        return found, f"{PYTHON_ENV} override"
    if deps_source == "host":
        return host_interpreter(), "offline: host-linked dependencies need the host interpreter"
    best: Interpreter | None = None
    for exe in _candidate_executables():
        found = _probe_interpreter(exe)
        if found is not None and found.version[:2] >= PREFERRED_MINOR and (best is None or found.version > best.version):
            best = found
    if best is not None:
        return best, f"newest installed Python >= {'.'.join(map(str, PREFERRED_MINOR))}"
    return host_interpreter(), f"no Python >= {'.'.join(map(str, PREFERRED_MINOR))} installed; using the current one"


def _satisfies(version: str, requires_python: str | None) -> bool:
    if not requires_python:
        return True
    try:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet  # noqa: PLC0415
    except ImportError:  # pragma: no cover - packaging ships with pip
        return False
    try:
        return version in SpecifierSet(requires_python)
    except InvalidSpecifier:
        return False


def profile_requirements(revision: Revision, profile: Profile) -> tuple[str, ...]:
    return revision.runtime_requirements if profile == "runtime" else revision.requirements


def venv_key(revision: Revision, interpreter: Interpreter, deps_source: DepsSource, profile: Profile = "shim") -> str:
    """Wheels key on their digest; source checkouts are read live, so only their deps matter."""
    identity: dict[str, object] = {
        "builder": BUILDER_VERSION,
        "revision": revision.digest if revision.wheel is not None else "source-tree-read-live",
        "python": interpreter.version_text,
        "executable": interpreter.executable,
        "requirements": list(profile_requirements(revision, profile)),
        "deps": deps_source,
    }
    if profile != "shim":
        identity["profile"] = profile
    if deps_source == "host":  # linked from this environment: one per environment in a per-user cache
        identity["host_prefix"] = sys.prefix
    blob = json.dumps(identity, sort_keys=True).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()[:16]


def dir_bytes(path: Path) -> int:
    total = 0
    for dirpath, _dirnames, filenames in os.walk(path):
        for name in filenames:
            full = os.path.join(dirpath, name)
            if not os.path.islink(full):
                try:
                    total += os.stat(full).st_size
                except OSError:
                    pass
    return total


def _has_broken_links(venv: Path) -> bool:
    """Host-linked deps point into this interpreter's environment, which may have been rebuilt."""
    return any(p.is_symlink() and not p.exists() for site in venv.glob("lib/python3.*/site-packages") for p in site.iterdir())


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _run(step: str, cmd: list[str], *, timeout: float = 900) -> None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise GymSetupError(step, f"{' '.join(cmd[:6])} … timed out after {timeout:.0f} s") from None  # type: ignore[arg-type]
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr or proc.stdout).strip().splitlines() if not ln.startswith("WARNING: Location")]
        raise GymSetupError(step, f"{' '.join(cmd[:6])} … exited {proc.returncode}: {' | '.join(lines[-4:])}")  # type: ignore[arg-type]


def _site_packages(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python3.*/site-packages"))
    if not found:
        raise GymSetupError("venv", f"{venv} has no site-packages")
    return found[0]


def _host_closure(names: tuple[str, ...]) -> list[metadata.Distribution]:
    """The installed distributions `names` need here, following their non-extra requirements."""
    from packaging.requirements import Requirement  # noqa: PLC0415

    todo = [n.split("=")[0].split("<")[0].split(">")[0].split("!")[0].strip() for n in names]
    seen: dict[str, metadata.Distribution] = {}
    while todo:
        name = todo.pop()
        key = name.lower().replace("_", "-")
        if key in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise GymSetupError("install", f"offline mode needs {name!r} installed here, but it is not") from None
        seen[key] = dist
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            todo.append(req.name)
    return [seen[k] for k in sorted(seen)]


def _link_host_distributions(names: tuple[str, ...], site: Path) -> list[str]:
    """Symlink just these distributions (and what they need) from this interpreter into the venv."""
    linked: list[str] = []
    for dist in _host_closure(names):
        tops = sorted({Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")})
        for top in tops:
            src = Path(str(dist.locate_file(top)))
            dst = site / top
            if src.exists() and not dst.exists():
                dst.symlink_to(src)
        linked.append(f"{dist.metadata['Name']}=={dist.version}")
    return linked


def _built(final: Path, key: str, interpreter: Interpreter, deps_source: DepsSource, ignore_rp: bool) -> BuiltVenv | None:
    """The venv at `final` when it was built completely (its manifest is written last) and its links still resolve."""
    if not (final / MANIFEST).exists() or _has_broken_links(final):
        return None
    manifest = json.loads((final / MANIFEST).read_text(encoding="utf-8"))
    return BuiltVenv(final, final / "bin" / "python", key, interpreter, deps_source, ignore_rp, False,
                     int(manifest.get("bytes", 0)), {}, manifest)


def _cached_index_venv(revision: Revision, cache_dir: Path, profile: Profile) -> BuiltVenv | None:
    """The venv an online check built for this revision and profile, for `--offline` to reuse (None if none is).

    An offline build links this interpreter's own packages instead of installing from the index, so it
    needs them installed here; a venv already built from the index needs nothing at all.
    """
    interpreter, _ = choose_interpreter(deps_source="index")
    key = venv_key(revision, interpreter, "index", profile)
    final = cache_dir / "venvs" / key
    with _locked(cache_dir / "venvs" / f".{key}.lock"):
        return _built(final, key, interpreter, "index", not _satisfies(interpreter.version_text, revision.requires_python))


def _cached_runtime(revision: Revision, cache_dir: Path) -> bool:
    """Whether some runtime venv of this revision is already built (offline live checks reuse it)."""
    for manifest in (cache_dir / "venvs").glob(f"*/{MANIFEST}"):
        try:
            data = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        if data.get("profile") == "runtime" and data.get("revision", {}).get("digest") == revision.digest:
            return True
    return False


def ensure_venv(revision: Revision, cache_dir: Path, *, offline: bool = False, profile: Profile = "shim") -> BuiltVenv:
    """Return the revision's venv, building it (under a lock, atomically) when it is not cached.

    The "runtime" profile (`gym-check --live`) installs what the revision's agent and model-server
    apps import (~0.9 GB for 0.7.0); it needs the index (an offline build links only the shim deps).
    """
    deps_source: DepsSource = "host" if offline else "index"
    if offline and profile == "runtime" and not _cached_runtime(revision, cache_dir):
        raise GymSetupError("install", "--offline: the revision's runtime venv (agent and model-server apps) is not "
                                       "cached; run the live check once with the index reachable")
    if offline and profile != "runtime":
        cached = _cached_index_venv(revision, cache_dir, profile)  # a warm cache needs no host-linked build
        if cached is not None:
            return cached
    interpreter, why = choose_interpreter(deps_source="index" if profile == "runtime" else deps_source)
    if profile == "runtime":
        deps_source = "index"
    ignore_rp = not _satisfies(interpreter.version_text, revision.requires_python)
    requirements = profile_requirements(revision, profile)
    key = venv_key(revision, interpreter, deps_source, profile)
    venvs = cache_dir / "venvs"
    final = venvs / key
    with _locked(venvs / f".{key}.lock"):
        existing = _built(final, key, interpreter, deps_source, ignore_rp)
        if existing is not None:
            return existing
        timing: dict[str, float] = {}
        tmp = venvs / f".tmp-{key}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        t0 = time.perf_counter()
        _run("venv", [interpreter.executable, "-m", "venv", str(tmp)])
        timing["venv_s"] = time.perf_counter() - t0
        py = str(tmp / "bin" / "python")
        pip = [py, "-m", "pip", "--disable-pip-version-check", "--no-input", "-q"]
        t0 = time.perf_counter()
        if deps_source == "host":
            installed = _link_host_distributions(requirements, _site_packages(tmp))
        else:
            _run("install", [*pip, "install", "--no-compile", *requirements])
            installed = list(requirements)
        timing["deps_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        if revision.wheel is not None:
            cmd = [*pip, "install", "--no-deps", "--no-compile", str(revision.wheel)]
            if ignore_rp:
                cmd.insert(len(pip) + 1, "--ignore-requires-python")
            if offline:
                cmd.insert(len(pip) + 1, "--no-index")
            _run("install", cmd)
        timing["revision_s"] = time.perf_counter() - t0
        size = dir_bytes(tmp)
        manifest = {
            "builder": BUILDER_VERSION,
            "key": key,
            "revision": revision.to_json(),
            "interpreter": {"executable": interpreter.executable, "version": interpreter.version_text, "why": why},
            "ignore_requires_python": ignore_rp,
            "deps_source": deps_source,
            "profile": profile,
            "dependencies": installed,
            "bytes": size,
            "build_timing": timing,
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True), encoding="utf-8")
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
    # venv scripts hard-code their directory; we only ever run `bin/python`, which resolves its own prefix.
    return BuiltVenv(final, final / "bin" / "python", key, interpreter, deps_source, ignore_rp, True, size, timing, manifest)


__all__ = [
    "BUILDER_VERSION",
    "CACHE_ENV",
    "MANIFEST",
    "PYTHON_ENV",
    "BuiltVenv",
    "DepsSource",
    "Profile",
    "Interpreter",
    "choose_interpreter",
    "default_cache_dir",
    "dir_bytes",
    "ensure_venv",
    "host_interpreter",
    "profile_requirements",
    "repo_root",
    "venv_key",
]
