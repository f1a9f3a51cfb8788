"""One import namespace: the repository's folders are `compactsim.harness`, `compactsim.agents`, ...

Never their bare folder names, in the code, the tests, the benchmarks, or the packaging metadata.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest

import compactsim

REPO = Path(__file__).resolve().parents[2]
TOPS = compactsim.SUBPACKAGES
#: Folders whose Python files must import compactsim's code through `compactsim.*` only.
SCANNED = (*TOPS, "compactsim", "tests", "bench", "scripts")


def _python_files() -> list[Path]:
    return sorted(p for top in SCANNED if (REPO / top).is_dir() for p in (REPO / top).rglob("*.py")
                  if "fixtures" not in p.relative_to(REPO).parts)


def bare_imports(source: str) -> list[str]:
    """Absolute imports whose first component is a bare folder name (`harness`, `agents`, ...)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] in TOPS]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.split(".")[0] in TOPS:
            found.append(node.module)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            value = node.args[0].value
            if called in ("import_module", "__import__", "importorskip") and isinstance(value, str) and value.split(".")[0] in TOPS:
                found.append(value)
    return found


def test_the_scan_catches_every_bare_import_form():
    source = ("import harness\nimport agents.items as items\nfrom scenarios.model import Scenario\n"
              "importlib.import_module('mock_servers.serving')\npytest.importorskip('harness.pipeline.loss')\n"
              "from compactsim.harness import cli\nfrom tests.unit.agents import x\n")
    assert bare_imports(source) == ["harness", "agents.items", "scenarios.model", "mock_servers.serving",
                                    "harness.pipeline.loss"]


@pytest.mark.parametrize("path", _python_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_file_imports_a_bare_folder_name(path: Path):
    assert bare_imports(path.read_text(encoding="utf-8")) == [], f"{path.relative_to(REPO)}: use compactsim.<package>"


def test_entry_points_name_the_compactsim_package():
    eps = importlib.metadata.entry_points()
    scripts = {ep.name: ep.value for ep in eps.select(group="console_scripts") if ep.name == "compactsim"}
    plugins = {ep.name: ep.value for ep in eps.select(group="pytest11") if ep.name == "compactsim"}
    assert scripts == {"compactsim": "compactsim.harness.cli:app"}
    assert plugins == {"compactsim": "compactsim.harness.pytest_plugin"}


#: Imports every module of every sub-package (the checkout's root first on sys.path, as pytest's
#: `pythonpath = ["."]` puts it), then lists top-level folder names and files loaded twice.
_IMPORT_ALL = """
import importlib, json, pkgutil, sys
import compactsim
names = []
for top in compactsim.SUBPACKAGES:
    package = importlib.import_module("compactsim." + top)
    names.append(package.__name__)
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        importlib.import_module(info.name)
        names.append(info.name)
bare = sorted(m for m in sys.modules if m.split(".")[0] in compactsim.SUBPACKAGES)
files = {}
for name, module in list(sys.modules.items()):
    path = getattr(module, "__file__", None)
    if name.split(".")[0] == "compactsim" and path:
        files.setdefault(path, []).append(name)
twice = {path: mods for path, mods in files.items() if len(mods) > 1}
print(json.dumps({"imported": len(names), "bare": bare, "twice": twice}))
"""


def test_every_module_imports_once_under_compactsim_only():
    out = subprocess.run([sys.executable, "-c", _IMPORT_ALL], capture_output=True, text=True, cwd=REPO,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "WANDB_MODE": "disabled"},
                         timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["imported"] > 150
    assert report["bare"] == []
    assert report["twice"] == {}


@pytest.mark.parametrize("statement", ["import harness", "import harness.core.errors", "from agents import collect",
                                       "import scenarios.model", "import mock_servers.serving"])
def test_a_bare_folder_name_refuses_to_import_in_the_checkout(statement: str):
    """With the checkout on sys.path the folders are importable by name; each refuses, naming the right import."""
    out = subprocess.run([sys.executable, "-c", statement], capture_output=True, text=True, cwd=REPO,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}, timeout=120, check=False)
    assert out.returncode != 0
    top = statement.split()[1].split(".")[0]
    assert f"ImportError: import compactsim.{top}, not {top}" in out.stderr


def test_examples_dir_holds_the_reference_payloads():
    assert compactsim.examples_dir() == REPO / "examples"
    assert sorted(p.name for p in compactsim.examples_dir().glob("*.json")) == [
        "gym-0.7.0-transport-compacted-3call.json", "gym-pr2870-transport-compacted-3call.json"]
