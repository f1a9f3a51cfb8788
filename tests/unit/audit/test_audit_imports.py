"""The audit reads plain data only: it never imports the pipeline (the system under test)."""

from __future__ import annotations

import ast
from pathlib import Path

AUDIT = Path(__file__).resolve().parents[3] / "harness" / "audit"


def test_audit_never_imports_the_pipeline():
    for path in sorted(AUDIT.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert not name.startswith("compactsim.harness.pipeline"), f"{path.name} imports {name}"
