"""Architecture lints: import floors (DESIGN §2) and randomness only from compactsim.harness.core.seeds."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: Import package of each repository folder: `harness/` is `compactsim.harness`, and so on.
PREFIX = "compactsim."
TOPS = ("harness", "mock_servers", "agents", "scenarios")
FLOOR = {
    "compactsim.harness.core": 1,
    "compactsim.harness.pipeline": 2,
    "compactsim.mock_servers": 2,
    "compactsim.agents": 2,
    "compactsim.scenarios": 2,
    "compactsim.harness.oracle": 3,
    "compactsim.harness.audit": 3,
}
TOP = 4  # runner, cli, commands, report, pytest plugin, gym_check
#: Same-floor packages that must not see each other (DESIGN §2 rules).
FORBIDDEN = {
    "compactsim.harness.pipeline": ("compactsim.agents", "compactsim.scenarios", "compactsim.mock_servers",
                                    "compactsim.harness.oracle", "compactsim.harness.audit"),
    "compactsim.mock_servers": ("compactsim.agents", "compactsim.scenarios"),
    "compactsim.harness.oracle": ("compactsim.harness.pipeline",),
}


def _module_name(path: Path) -> str:
    """The import name of a source file: `harness/core/seeds.py` is `compactsim.harness.core.seeds`."""
    rel = path.relative_to(REPO).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return PREFIX + ".".join(parts)


def _floor(module: str) -> int | None:
    for prefix, floor in sorted(FLOOR.items(), key=lambda kv: -len(kv[0])):
        if module == prefix or module.startswith(prefix + "."):
            return floor
    if module == "compactsim.harness" or module.startswith("compactsim.harness."):
        return TOP
    return None


def _package(module: str) -> str | None:
    for prefix in sorted(FLOOR, key=len, reverse=True):
        if module == prefix or module.startswith(prefix + "."):
            return prefix
    return None


def _sources() -> list[Path]:
    out: list[Path] = []
    for top in TOPS:
        out += sorted((REPO / top).rglob("*.py"))
    return out


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(REPO)))
def test_module_imports_only_its_floor_or_below(path: Path):
    module = _module_name(path)
    own = _floor(module)
    package = _package(module)
    for imported in _imports(path):
        floor = _floor(imported)
        if floor is None:
            continue
        assert floor <= own, f"{module} (floor {own}) imports {imported} (floor {floor})"
        for banned in FORBIDDEN.get(package or "", ()):
            assert not (imported == banned or imported.startswith(banned + ".")), f"{module} must not import {imported}"


_RNG_PATTERNS = [
    (re.compile(r"^\s*import random\b|^\s*from random import", re.M), "stdlib random"),
    (re.compile(r"np\.random\.(?!Generator\b|Philox\b|default_rng\b)[a-z_]+\("), "global numpy RNG"),
    (re.compile(r"np\.random\.default_rng\(\s*\)"), "unseeded numpy generator"),
    (re.compile(r"torch\.(rand|randn|randint|randperm|multinomial|normal)\((?![^)]*generator=)[^)]*\)"), "torch RNG without generator"),
    (re.compile(r"\btime\.time\(\)|datetime\.now\("), "wall clock"),
]
_RNG_ALLOWED = {"harness/core/seeds.py"}
#: Modules that measure time for reports/benchmarks (never in artifacts digests).
_CLOCK_ALLOWED_DIRS = ("harness/runner", "harness/report", "harness/commands", "bench/")


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(REPO)))
def test_randomness_comes_only_from_keyed_generators(path: Path):
    rel = str(path.relative_to(REPO))
    if rel in _RNG_ALLOWED:
        return
    text = path.read_text(encoding="utf-8")
    for pattern, what in _RNG_PATTERNS:
        if what == "wall clock" and rel.startswith(_CLOCK_ALLOWED_DIRS):
            continue
        match = pattern.search(text)
        assert match is None, f"{rel} uses {what}: {match.group(0)!r} (use compactsim.harness.core.seeds)"
