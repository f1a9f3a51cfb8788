"""The version a source checkout declares dynamically, read from its files without importing them.

NeMo-Gym's `pyproject.toml` says ``dynamic = ["version"]`` with
``[tool.setuptools.dynamic] version = {attr = "nemo_gym.__version__"}``; `nemo_gym/__init__.py` imports
``__version__`` from `package_info.py`, which builds it from ``MAJOR, MINOR, PATCH, PRE_RELEASE`` the way
every NVIDIA NeMo package does. Importing the package would run the revision's code (and need its
dependencies) before it is checked, so the module is read as a syntax tree instead: string literals,
tuples of them, names assigned earlier in the same module, slices, ``+``, ``str(x)``,
``sep.join(map(str, ...))`` and ``sep.join(...)``, and one ``from M import __version__`` hop. Anything
else (a version computed by a build hook, setuptools-scm from git) is unknown: None.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: ``from A import __version__`` hops followed before giving up (NeMo's layout needs one).
_MAX_HOPS = 3


class _Unknown(Exception):
    """An expression this reader does not evaluate."""


def dynamic_version(root: Path, pyproject: Mapping[str, Any]) -> str | None:
    """The version `[tool.setuptools.dynamic] version = {attr = "pkg.mod.NAME"}` names, or None when unreadable."""
    attr = pyproject.get("tool", {}).get("setuptools", {}).get("dynamic", {}).get("version", {})
    target = attr.get("attr") if isinstance(attr, Mapping) else None
    if not isinstance(target, str) or "." not in target:
        return None
    module, name = target.rsplit(".", 1)
    value = _module_value(root, module, name, _MAX_HOPS)
    return value if isinstance(value, str) and value else None


def _module_file(root: Path, module: str) -> Path | None:
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file() and root in candidate.resolve().parents:
            return candidate
    return None


def _module_value(root: Path, module: str, name: str, hops: int) -> Any:
    path = _module_file(root, module)
    if path is None:
        return None
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None
    names: dict[str, Any] = {}
    for node in tree.body:  # module level only, in order, like the interpreter would bind them
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                names[node.targets[0].id] = _evaluate(node.value, names)
            except _Unknown:
                names.pop(node.targets[0].id, None)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and hops > 0:
            for alias in node.names:
                if alias.name == name and (alias.asname or alias.name) == name:
                    names[name] = _module_value(root, node.module, name, hops - 1)
    return names.get(name)


def _evaluate(node: ast.AST, names: Mapping[str, Any]) -> Any:
    """The value of a small, side-effect-free expression, else `_Unknown`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str | int):
        return node.value
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if isinstance(node, ast.Tuple | ast.List):
        return tuple(_evaluate(e, names) for e in node.elts)
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice) and node.slice.step is None:
        seq = _evaluate(node.value, names)
        lo = _evaluate(node.slice.lower, names) if node.slice.lower is not None else None
        hi = _evaluate(node.slice.upper, names) if node.slice.upper is not None else None
        if isinstance(seq, tuple | str) and all(x is None or isinstance(x, int) for x in (lo, hi)):
            return seq[lo:hi]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _evaluate(node.left, names), _evaluate(node.right, names)
        if isinstance(left, str) and isinstance(right, str):
            return left + right
    if isinstance(node, ast.Call) and not node.keywords:
        return _call(node, names)
    raise _Unknown


def _call(node: ast.Call, names: Mapping[str, Any]) -> Any:
    func, args = node.func, node.args
    if isinstance(func, ast.Name) and func.id == "str" and len(args) == 1:
        value = _evaluate(args[0], names)
        if isinstance(value, str | int):
            return str(value)
    if isinstance(func, ast.Attribute) and func.attr == "join" and len(args) == 1:
        sep = _evaluate(func.value, names)
        arg = args[0]
        if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id == "map" and len(arg.args) == 2 \
                and isinstance(arg.args[0], ast.Name) and arg.args[0].id == "str" and not arg.keywords:
            items = tuple(str(x) for x in _sequence(_evaluate(arg.args[1], names)))
        else:
            items = _sequence(_evaluate(arg, names))
        if isinstance(sep, str) and all(isinstance(x, str) for x in items):
            return sep.join(items)
    raise _Unknown


def _sequence(value: Any) -> tuple[Any, ...]:
    if isinstance(value, tuple) and all(isinstance(x, str | int) for x in value):
        return value
    raise _Unknown


__all__ = ["dynamic_version"]
