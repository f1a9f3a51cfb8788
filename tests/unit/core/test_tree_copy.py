"""`copy_tree` builds the same copy as `copy.deepcopy`, sharing included, and never aliases the original."""

from __future__ import annotations

import copy
import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from compactsim.harness.core.tree_copy import copy_tree

_leaf = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6)
json_like = st.recursive(
    _leaf,
    lambda c: (st.lists(c, max_size=5) | st.lists(c, max_size=3).map(tuple)
               | st.dictionaries(st.text(max_size=4), c, max_size=5) | st.dictionaries(st.integers(-3, 3), c, max_size=3)),
    max_leaves=30,
)


def same(a: Any, b: Any) -> bool:
    """Equal with the same types and the same key order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))


def mutable_nodes(value: Any) -> list[int]:
    if isinstance(value, dict):
        return [id(value), *(i for v in value.values() for i in mutable_nodes(v))]
    if isinstance(value, (list, tuple)):
        return [id(value)] * isinstance(value, list) + [i for v in value for i in mutable_nodes(v)]
    return []


@given(json_like)
def test_copy_tree_equals_deepcopy_and_shares_nothing_mutable(value: Any):
    copied = copy_tree(value)
    assert same(copied, copy.deepcopy(value))
    assert not set(mutable_nodes(copied)) & set(mutable_nodes(value))


def test_a_node_met_twice_stays_shared_as_deepcopy_keeps_it():
    row = [1, 2]
    copied = copy_tree({"a": row, "b": row, "nan": math.nan})
    assert copied["a"] is copied["b"] and copied["a"] is not row and math.isnan(copied["nan"])


def test_what_pickle_refuses_is_deep_copied():
    value = {"ids": [1, 2], "fn": lambda: 1}  # pickle refuses a lambda; deepcopy keeps the function itself
    copied = copy_tree(value)
    assert copied["fn"] is value["fn"] and copied["ids"] == [1, 2] and copied["ids"] is not value["ids"]
