"""`agents/` sub-packages import only downwards: items, media < compaction < rollout < evidence < collect."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

AGENTS = Path(__file__).resolve().parents[3] / "agents"
#: Rank of each sub-package (a module may import its own rank or lower).
RANK = {"items": 0, "media": 0, "compaction": 1, "rollout": 2, "evidence": 3, "collect": 4}


def _unit(module: str) -> str:
    return module.split(".")[2]


def _agents_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("compactsim.agents."):
            out.append(node.module)
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names if a.name.startswith("compactsim.agents.")]
    return out


def _modules() -> list[Path]:
    return sorted(p for p in AGENTS.rglob("*.py") if p.parent != AGENTS)


def test_every_module_lives_in_a_ranked_sub_package():
    flat = sorted(p.name for p in AGENTS.glob("*.py"))
    assert flat == ["__init__.py", "items.py"]
    assert sorted(p.name for p in AGENTS.iterdir() if p.is_dir() and p.name != "__pycache__") == [
        "collect", "compaction", "evidence", "media", "rollout"]


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(AGENTS)))
def test_sub_packages_import_only_downwards(path: Path):
    own = RANK[path.relative_to(AGENTS).parts[0]]
    for imported in _agents_imports(path):
        assert RANK[_unit(imported)] <= own, f"{path.relative_to(AGENTS)} imports {imported}"


def _name(path: Path) -> str:
    parts = list(path.relative_to(AGENTS.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_import_cycle_between_agent_modules():
    graph = {_name(p): {m for m in _agents_imports(p)} for p in AGENTS.rglob("*.py")}
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(node: str, stack: list[str]) -> bool:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycle.extend([*stack[stack.index(nxt):], nxt] if nxt in stack else [node, nxt])
                return True
            if state.get(nxt) is None and nxt in graph and visit(nxt, [*stack, nxt]):
                return True
        state[node] = 2
        return False

    found = any(visit(n, [n]) for n in sorted(graph) if state.get(n) is None)
    assert not found, " -> ".join(cycle)
