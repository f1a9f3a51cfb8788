"""`close`, the audit's float comparison: NaN and the infinities, where |a − b| says nothing."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compactsim.harness.audit.checks import close

INF, NAN = math.inf, math.nan


@pytest.mark.parametrize(("actual", "expected", "same"), [
    (INF, INF, True),  # an overflowing step on both sides (a KL penalty of 1e300): |inf − inf| is NaN
    (-INF, -INF, True),
    (INF, -INF, False),
    (1e308, INF, False),  # atol + rtol·|inf| is inf, which every finite |diff| was within
    (INF, 1e308, False),
    (NAN, NAN, True),
    (NAN, 1.0, False),
    (1.0, NAN, False),
])
def test_nan_and_infinities(actual: float, expected: float, same: bool):
    assert close(actual, expected, 1e-12, 1e-9) is same


@given(st.floats(allow_nan=False, allow_infinity=False), st.floats(min_value=0, max_value=1e-3))
def test_finite_values_within_their_tolerance(x: float, rtol: float):
    assert close(x, x, 0.0, 0.0)
    assert close(x * (1 + rtol / 2), x, 0.0, rtol) or math.isinf(x * (1 + rtol / 2))
