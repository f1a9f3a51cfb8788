"""The oracle never imports the pipeline (DESIGN §2): an AST scan of every oracle module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ORACLE = Path(__file__).resolve().parents[3] / "harness" / "oracle"
SOURCES = sorted(ORACLE.rglob("*.py"))


def _imported(tree: ast.AST) -> list[str]:
    """Every module named by an import statement, `importlib.import_module(...)` or `__import__(...)`."""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against compactsim.harness.oracle
                base = ".".join(["compactsim", "harness", "oracle"][: max(0, 3 - (node.level - 1))] + ([base] if base else []))
            names.append(base)
            names += [f"{base}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                names.append(node.args[0].value)
    return names


def test_the_oracle_package_has_modules_to_scan():
    assert {p.name for p in SOURCES} >= {"__init__.py", "expect.py", "grpo.py", "plan.py", "rows.py", "truth.py"}


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_oracle_module_imports_nothing_from_the_pipeline(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bad = [n for n in _imported(tree) if n == "compactsim.harness.pipeline" or n.startswith("compactsim.harness.pipeline.")]
    assert bad == [], f"{path.name} imports {bad}"
    assert "compactsim.harness.pipeline" not in path.read_text(encoding="utf-8").replace("never imports the pipeline", "")


def test_the_scan_catches_every_import_form():
    source = (
        "import compactsim.harness.pipeline.planner\n"
        "from compactsim.harness.pipeline import materializer\n"
        "from compactsim.harness import pipeline\n"
        "import importlib\nimportlib.import_module('compactsim.harness.pipeline.routes')\n"
        "__import__('compactsim.harness.pipeline')\n"
    )
    found = _imported(ast.parse(source))
    assert [n for n in found if n.startswith("compactsim.harness.pipeline")] == [
        "compactsim.harness.pipeline.planner", "compactsim.harness.pipeline", "compactsim.harness.pipeline.materializer", "compactsim.harness.pipeline",
        "compactsim.harness.pipeline.routes", "compactsim.harness.pipeline",
    ]


def test_importing_the_oracle_loads_no_pipeline_module_even_indirectly():
    import subprocess
    import sys

    code = (
        "import sys, compactsim.harness.oracle, compactsim.harness.oracle.expect\n"
        "loaded = sorted(m for m in sys.modules if m == 'compactsim.harness.pipeline' or m.startswith('compactsim.harness.pipeline.'))\n"
        "print(loaded)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[3])
    assert out.stdout.strip() == "[]"
