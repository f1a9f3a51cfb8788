"""The splitmix64 finaliser behind scripted logprobs and routes: the published values, and the same
bits as the plain masked formula for any input shape, with no numpy overflow warning."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from compactsim.mock_servers.model_server import sampling

_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


def reference(x: np.ndarray) -> np.ndarray:
    """Vigna's splitmix64 finaliser written out with explicit masks (the formula, not the fast path)."""
    with np.errstate(over="ignore"):
        z = (x + np.uint64(0x9E3779B97F4A7C15)) & _MASK
        z = ((z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK
        z = ((z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK
        return z ^ (z >> np.uint64(31))


def test_the_published_first_outputs_of_a_zero_seed() -> None:
    """splitmix64 seeded with 0 yields 0xE220A8397B1DCDAF, then 0x6E789E6AA1B965F4 (state += gamma each call)."""
    out = sampling.splitmix64(np.array([0, 0x9E3779B97F4A7C15], dtype=np.uint64))
    assert [int(v) for v in out] == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4]


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(np.uint64, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5)))
def test_same_bits_as_the_masked_formula_without_warnings(x: np.ndarray) -> None:
    before = x.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = sampling.splitmix64(x)
    assert got.shape == x.shape and got.dtype == np.uint64
    assert np.array_equal(got, reference(x))
    assert np.array_equal(x, before)  # the input is never written


@pytest.mark.parametrize("key", [0, 1, 2**62 + 12345, 2**63 - 1])
@settings(max_examples=50, deadline=None)
@given(counters=hnp.arrays(np.int64, st.integers(0, 40), elements=st.integers(0, 2**40)))
def test_counter_draws_wrap_key_plus_counter(key: int, counters: np.ndarray) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = sampling._counter_u64(key, counters)
    with np.errstate(over="ignore"):
        want = reference((np.uint64(key) + counters.astype(np.uint64)) & _MASK)
    assert np.array_equal(got, want)
