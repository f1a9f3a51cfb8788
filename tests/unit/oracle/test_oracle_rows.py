"""Expected rows: tokens, spans, logprobs, media pixel digests and the router-replay route tensor."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from compactsim.harness.core.errors import ConfigError
from compactsim.harness.core.images import png_data_url
from compactsim.harness.oracle.plan import expected_plan
from compactsim.harness.oracle.rows import batch_route_layout, expected_rows, pixel_digest_of_data_url, trace_routes
from tests.unit.oracle.oracle_builders import call, continuing, packed_routes, rollout

RED_BLUE = np.array([[[255, 0, 0], [0, 0, 255]]], dtype=np.uint8)  # 1 x 2 pixels
RED_BLUE_URL = png_data_url(RED_BLUE)


def _routed_rollout(second_has_routes: bool = True):
    c1 = call(1, [1, 2, 3], [11, 12], routes=packed_routes(5, 1))
    c2 = continuing(c1, 2, [4, 5], [21, 22], routes=packed_routes(9, 2) if second_has_routes else None)
    c3 = call(3, [1, 2, 3, 9, 21, 22, 6], [31, 32, 33], boundary=True, routes=packed_routes(10, 3))
    return rollout([c1, c2, c3])


def test_pixel_digest_is_sha256_of_rgb_bytes_in_row_major_order():
    assert pixel_digest_of_data_url(RED_BLUE_URL) == hashlib.sha256(bytes([255, 0, 0, 0, 0, 255])).hexdigest()


@pytest.mark.parametrize("url", ["/etc/passwd", "data:text/plain;base64,AAAA", "data:image/png,xyz"])
def test_pixel_digest_refuses_anything_but_a_base64_image_data_url(url):
    with pytest.raises(ConfigError) as info:
        pixel_digest_of_data_url(url)
    assert info.value.code == "invalid_argument"


def test_routes_are_repaired_inside_a_trace_and_the_boundary_gets_the_sentinel():
    plan = expected_plan(_routed_rollout())
    first, second = plan.traces
    routes, sentinels, repaired = trace_routes(first, (1, 2), is_final_trace=False)
    assert routes.shape == (9, 1, 2)
    assert routes[:4].tolist() == [[[100 + t, 101 + t]] for t in range(4)]  # call 1's own rows
    assert routes[4].tolist() == [[204, 205]]  # call 1's placeholder repaired from call 2's prefill
    assert routes[5:8].tolist() == [[[200 + t, 201 + t]] for t in range(5, 8)]
    assert routes[8].tolist() == [[-1, -1]]  # never the placeholder, never call 3's route
    assert (sentinels, repaired) == ((8,), (4,))
    routes, sentinels, repaired = trace_routes(second, (1, 2), is_final_trace=True)
    assert routes[:9].tolist() == [[[300 + t, 301 + t]] for t in range(9)]
    assert routes[9].tolist() == [[0, 1]]  # the final token keeps the placeholder
    assert (sentinels, repaired) == ((), ())


def test_a_call_without_routes_is_backfilled_with_the_sentinel_and_repairs_nothing():
    plan = expected_plan(_routed_rollout(second_has_routes=False))
    routes, sentinels, repaired = trace_routes(plan.traces[0], (1, 2), is_final_trace=False)
    assert routes[4:9].tolist() == [[[-1, -1]]] * 5
    assert routes[:4].tolist() == [[[100 + t, 101 + t]] for t in range(4)]
    assert (sentinels, repaired) == ((8,), ())


def test_expected_rows_hold_last_prompt_spans_logprobs_media_and_routes():
    c1 = call(1, [1, 2, 3], [11, 12], logprobs=[-0.5, -0.25], routes=packed_routes(5, 1))
    c2 = continuing(c1, 2, [4, 5], [21, 22], logprobs=[-0.125, -1.0], media=["m"], routes=packed_routes(9, 2))
    truth = rollout([c1, c2], media={"m": RED_BLUE_URL})
    plan = expected_plan(truth)
    cache: dict[str, str] = {}
    (row,) = expected_rows(plan, advantage=0.75, mask_sample=True, route_layout=batch_route_layout([plan]),
                           pixel_digests=cache)
    assert row.physical_trace_id == "s0-g0-r0/trace-0" and row.logical_rollout_id == "s0-g0-r0"
    assert row.input_ids == (1, 2, 3, 11, 12, 4, 5, 21, 22)
    assert row.mask_spans == ((3, 5), (7, 9))
    assert row.trainable_positions == (3, 4, 7, 8)
    assert row.generation_logprobs == (-0.5, -0.25, -0.125, -1.0)
    assert (row.advantage, row.sample_mask) == (0.75, 0.0)
    assert row.media_ids == ("m",)
    assert row.pixel_digests == (hashlib.sha256(bytes([255, 0, 0, 0, 0, 255])).hexdigest(),)
    assert cache == {"m": row.pixel_digests[0]}
    assert (row.sentinel_positions, row.repaired_positions) == ((), (4,))
    assert row.routes.shape == (9, 1, 2)
    assert row.to_json()["mask_spans"] == [[3, 5], [7, 9]]


def test_rows_without_any_routes_in_the_batch_have_no_route_tensor_and_no_sentinel():
    c1 = call(1, [1], [2])
    c2 = call(2, [7], [3], boundary=True)
    plan = expected_plan(rollout([c1, c2]))
    assert batch_route_layout([plan]) is None
    rows = expected_rows(plan, advantage=0.0, mask_sample=False, route_layout=None)
    assert [(r.routes, r.sentinel_positions) for r in rows] == [(None, ()), (None, ())]


def test_a_trace_without_routes_in_a_routed_batch_is_all_sentinel_with_its_boundary_stamped():
    c1 = call(1, [1], [2])
    c2 = call(2, [7], [3], boundary=True)
    plan = expected_plan(rollout([c1, c2]))
    rows = expected_rows(plan, advantage=0.0, mask_sample=False, route_layout=(1, 2))
    assert rows[0].routes.tolist() == [[[-1, -1]], [[-1, -1]]]
    assert rows[0].sentinel_positions == (1,) and rows[1].sentinel_positions == ()


def test_a_row_media_id_missing_from_the_log_is_a_config_error():
    plan = expected_plan(rollout([call(1, [1], [2], media=["m"])], media={"m": RED_BLUE_URL}))
    plan.truth.media.pop("m")  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="'m' is not in the log's media table"):
        expected_rows(plan, advantage=0.0, mask_sample=False, route_layout=None)


def test_an_invalid_plan_has_no_rows():
    plan = expected_plan(rollout([call(1, [1], [2]), call(2, [9], [3])]))
    assert plan.error is not None
    assert expected_rows(plan, advantage=1.0, mask_sample=False, route_layout=None) == ()
