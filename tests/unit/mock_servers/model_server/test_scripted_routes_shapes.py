"""Scripted routes for every router shape `serve` accepts (up to 127 experts x top-16), not only the small ones.

A route is the permutation of rank ``draw mod nPk`` in `itertools.permutations` order. Small shapes look it up
in a table of every permutation; that table for 16 experts x top-8 has ~5e8 rows (a MemoryError, a 500), so
larger shapes unrank each draw. The two must agree wherever both exist, so no earlier answer changes.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactsim.mock_servers.model_server import ServerSettings, sampling
from tests.unit.mock_servers.model_server.server_builders import client_for


@pytest.mark.parametrize("experts", range(1, 9))
def test_unranking_is_the_table_for_every_shape_up_to_eight_experts(experts: int) -> None:
    for top_k in range(1, experts + 1):
        table = sampling._permutations(experts, top_k)
        assert np.array_equal(sampling._unrank(list(range(len(table))), experts, top_k), table), (experts, top_k)


@settings(max_examples=60, deadline=None)
@given(experts=st.integers(9, 12), top_k=st.integers(1, 4), rank=st.integers(0, 10**9))
def test_unranking_above_the_table_is_itertools_order(experts: int, top_k: int, rank: int) -> None:
    rank %= sampling._count(experts, top_k)
    expected = next(itertools.islice(itertools.permutations(range(experts), top_k), rank, None))
    assert tuple(sampling._unrank([rank], experts, top_k)[0]) == expected


def test_the_largest_shape_draws_distinct_experts_in_range_deterministically() -> None:
    routes = sampling.scripted_routes(3, "r", 1, 40, 128, 127, 16)
    assert routes.shape == (40, 128, 16) and routes.min() >= 0 and routes.max() <= 126
    assert all(len(set(row)) == 16 for row in routes.reshape(-1, 16).tolist())
    assert np.array_equal(routes, sampling.scripted_routes(3, "r", 1, 40, 128, 127, 16))


def test_a_server_of_127_experts_top_16_answers_with_routes() -> None:
    """It used to build every permutation for the first answer: a MemoryError, answered as a 500."""
    server = ServerSettings.model_validate({"num_layers": 3, "num_experts": 127, "top_k": 16,
                                            "routed_experts_format": "nrlre1"})
    with client_for(server) as client:
        resp = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
    assert resp.status_code == 200, resp.text
    choice = resp.json()["choices"][0]
    routes = choice["message"].get("routed_experts") or choice.get("routed_experts")
    assert isinstance(routes, str) and routes.startswith("nrlre1:int16:") and "x3x16:" in routes


def test_beyond_two_to_the_64_permutations_every_expert_can_lead():
    """127P16 > 2**64: one 64-bit draw reaches only ranks below 2**64, whose permutations all begin 0, 1, 2, ...;
    the rank is read from several draws instead."""
    assert sampling._count(127, 16) > 2**64
    first = sampling.scripted_routes(3, "r", 1, 200, 8, 127, 16)[:, :, 0]
    assert len(set(first.ravel().tolist())) > 100  # of 127 experts, over 1,600 draws


def test_shapes_under_two_to_the_64_keep_one_draw_per_route():
    """9 experts x top-8 (362,880 permutations) answered before as table[draw mod nPk]: the same routes now."""
    table = sampling._permutations(9, 8)
    key = sampling.derive_int(3, "scripted_route", rollout="r", call=1)
    draws = sampling._counter_u64(key, np.arange(5 * 2, dtype=np.uint64))
    expected = table[(draws % np.uint64(len(table))).astype(np.int64)].reshape(5, 2, 8)
    assert np.array_equal(sampling.scripted_routes(3, "r", 1, 5, 2, 9, 8), expected)
