"""Packaging: the repository's top-level folders install as sub-packages of one `compactsim` package.

``harness/`` → ``compactsim.harness``, ``mock_servers/`` → ``compactsim.mock_servers``,
``agents/`` → ``compactsim.agents``, ``scenarios/`` → ``compactsim.scenarios`` and the
``examples/`` payloads → ``compactsim/examples`` (data). Metadata lives in pyproject.toml.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).resolve().parent
TOPS: tuple[str, ...] = ("harness", "mock_servers", "agents", "scenarios")
DATA_SUFFIXES: tuple[str, ...] = (".yaml", ".json")


def _data_dirs() -> dict[str, list[str]]:
    """Package name -> data file patterns, for every folder holding data (`scenarios/catalogue` too)."""
    data: dict[str, set[str]] = {"compactsim.examples": {"*.json"}}
    for top in TOPS:
        for path in (ROOT / top).rglob("*"):
            if path.suffix in DATA_SUFFIXES and "__pycache__" not in path.parts:
                package = "compactsim." + ".".join(path.parent.relative_to(ROOT).parts)
                data.setdefault(package, set()).add(f"*{path.suffix}")
    return {package: sorted(patterns) for package, patterns in sorted(data.items())}


def _packages() -> list[str]:
    """`compactsim`, every package under the folders, and the data-only folders (examples, catalogue)."""
    found = find_packages(where=str(ROOT), include=[pattern for top in TOPS for pattern in (top, f"{top}.*")])
    return sorted({"compactsim", *(f"compactsim.{name}" for name in found), *_data_dirs()})


setup(
    packages=_packages(),
    package_dir={"compactsim": "compactsim", "compactsim.examples": "examples",
                 **{f"compactsim.{top}": top for top in TOPS}},
    package_data=_data_dirs(),
)
