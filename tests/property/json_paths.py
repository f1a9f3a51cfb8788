"""Addressing nodes of a decoded JSON document by path, for the mutation fuzzers of this folder."""

from __future__ import annotations

from typing import Any


def paths(node: Any, path: tuple = (), *, entries: int | None = None) -> list[tuple]:
    """Every path into `node` (the root's is ``()``), keys and list indices in document order.

    `entries` limits how many entries of each list are walked (long per-token lists: their first
    entries stand for the rest); None walks them all.
    """
    out = [path]
    if isinstance(node, dict):
        for key, child in node.items():
            out += paths(child, (*path, key), entries=entries)
    elif isinstance(node, list):
        for i, child in enumerate(node if entries is None else node[:entries]):
            out += paths(child, (*path, i), entries=entries)
    return out


def at(node: Any, path: tuple) -> Any:
    """The node at `path`."""
    for key in path:
        node = node[key]
    return node
