"""`parse_routes`: any JSON value is either a (tokens, layers, topk) int64 array or one typed error naming the entry."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from compactsim.harness.golden.routes_field import RoutesFieldError, parse_routes, routes_json

JSON_SCALARS = st.none() | st.booleans() | st.integers(-3, 2**40) | st.floats(allow_nan=True) | st.text(max_size=3)
JSON = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=2), inner,
                                                                                               max_size=2), max_leaves=30)


@settings(max_examples=600, deadline=None)
@given(value=JSON, n=st.integers(0, 4))
def test_any_json_value_is_an_exact_array_or_one_routes_field_error(value: Any, n: int):
    try:
        arr = parse_routes(value, n)
    except RoutesFieldError as exc:
        assert exc.field.startswith("routed_experts") and exc.problem
        return
    assert arr.dtype == np.int64 and arr.ndim == 3 and arr.shape[0] == n
    if n:
        assert arr.shape[1] >= 1 and arr.shape[2] >= 1 and int(arr.min()) >= -1
        assert routes_json(arr) == [[[int(x) for x in layer] for layer in token] for token in value]


@settings(max_examples=200, deadline=None)
@given(data=st.data(), n=st.integers(1, 5), layers=st.integers(1, 3), topk=st.integers(1, 3))
def test_well_formed_routes_round_trip_exactly(data: st.DataObject, n: int, layers: int, topk: int):
    ids = st.integers(-1, 2**31 - 1)
    value = data.draw(st.lists(st.lists(st.lists(ids, min_size=topk, max_size=topk), min_size=layers, max_size=layers),
                               min_size=n, max_size=n))
    assert routes_json(parse_routes(value, n)) == value


def test_a_bool_among_ints_is_refused_though_numpy_would_read_it_as_one():
    try:
        parse_routes([[[0, True]]], 1)
    except RoutesFieldError as exc:
        assert (exc.field, "got True" in exc.problem) == ("routed_experts[0][0][1]", True)
    else:
        raise AssertionError("a bool passed as an expert id")
