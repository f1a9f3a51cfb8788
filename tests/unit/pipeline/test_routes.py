"""Router replay: vLLM packing accepted, placeholders repaired, boundary sentinels, backfill, padding."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from compactsim.harness.core.errors import ContractError
from compactsim.harness.core.evidence import ModelCall
from compactsim.harness.pipeline.advantages import compute_logical_advantages
from compactsim.harness.pipeline.materializer import prepare_trace_batch
from compactsim.harness.pipeline.routes import call_routes, fill_trace_routes, route_dtype, trace_route_layout
from compactsim.harness.pipeline.train_config import MaterializeConfig
from tests.unit.pipeline.materializer_builders import call_routes as packed_routes
from tests.unit.pipeline.materializer_builders import make_rollout

torch.set_num_threads(1)

LAYOUT = (2, 2)  # L=2 MoE layers, top-k 2
SENTINEL = [[-1, -1], [-1, -1]]
PLACEHOLDER = [[0, 1], [0, 1]]


def _call(prompt_len: int, sampled_len: int, routes: np.ndarray | None, turn: int = 1) -> ModelCall:
    return ModelCall(
        turn_id=turn,
        prompt_token_ids=tuple(range(prompt_len)),
        sampled_token_ids=tuple(range(100, 100 + sampled_len)),
        sampled_logprobs=(-0.5,) * sampled_len,
        routed_experts=routes,
    )


def _batch(plans, **cfg):
    logical = compute_logical_advantages([p.evidence for p in plans])
    return prepare_trace_batch(plans, None, logical, MaterializeConfig(**cfg))


# ---------------------------------------------------------------------------------------------
# per-call packing


def test_call_routes_accept_exact_rows_and_drop_one_surplus_row():
    exact = _call(3, 2, packed_routes(0, 5, LAYOUT))
    surplus = _call(3, 2, packed_routes(0, 5, LAYOUT, surplus=True))
    assert call_routes(exact, rollout_id="r").shape == (5, 2, 2)
    out = call_routes(surplus, rollout_id="r")
    assert out.shape == (5, 2, 2)
    assert out[4].tolist() == PLACEHOLDER


def test_call_without_routes_has_none():
    assert call_routes(_call(3, 2, None), rollout_id="r") is None


@pytest.mark.parametrize("rows", [4, 7])
def test_route_row_count_outside_prompt_plus_sampled_plus_one_is_rejected(rows):
    call = _call(3, 2, np.zeros((rows, 2, 2), dtype=np.int16), turn=4)
    with pytest.raises(ContractError) as info:
        call_routes(call, rollout_id="r9")
    assert info.value.code == "routed_experts_shape"
    assert info.value.rollout_id == "r9" and info.value.turn_id == 4
    assert f"routed_experts has {rows} rows for 5 tokens (prompt 3 + sampled 2)" in str(info.value)
    assert "at most one surplus final-token route" in str(info.value)


def test_route_array_that_is_not_three_dimensional_is_rejected():
    with pytest.raises(ContractError) as info:
        call_routes(_call(3, 2, np.zeros((5, 2), dtype=np.int16)), rollout_id="r")
    assert info.value.code == "routed_experts_shape"
    assert "must be an integer array [tokens, layers, topk], got int16 shape [5, 2]" in str(info.value)


def test_calls_of_one_trace_must_share_layers_and_topk():
    a = _call(3, 2, packed_routes(0, 5, (2, 2)), turn=1)
    b = _call(7, 1, packed_routes(1, 8, (3, 2)), turn=2)
    with pytest.raises(ContractError) as info:
        trace_route_layout([a, b], [call_routes(a, rollout_id="r"), call_routes(b, rollout_id="r")], rollout_id="r")
    assert info.value.code == "routed_experts_shape"
    assert info.value.turn_id == 2
    assert "[layers, topk]=[3, 2] but earlier calls of the trace have [2, 2]" in str(info.value)


def test_route_dtype_is_int16_unless_an_input_is_wider():
    assert route_dtype([np.zeros(1, np.int8), np.zeros(1, np.int16)]) == torch.int16
    assert route_dtype([np.zeros(1, np.int16), np.zeros(1, np.int32)]) == torch.int32


# ---------------------------------------------------------------------------------------------
# one row


def _two_call_trace():
    c0 = _call(3, 2, packed_routes(0, 5, LAYOUT), turn=1)  # tokens 0..4
    c1 = ModelCall(
        turn_id=2,
        prompt_token_ids=tuple(range(7)),
        sampled_token_ids=(200, 201),
        sampled_logprobs=(-0.1, -0.2),
        routed_experts=packed_routes(1, 9, LAYOUT),
    )
    return c0, c1


def test_placeholder_of_a_non_final_call_is_repaired_from_the_next_prefill():
    c0, c1 = _two_call_trace()
    out = np.full((9, 2, 2), 99, dtype=np.int16)
    sentinels = fill_trace_routes(out, [c0, c1], [c0.routed_experts, c1.routed_experts], is_final_trace=True)
    assert sentinels == ()
    # call 0 owns tokens 0..3 (its own rows), token 4 (its final token) comes from call 1's prefill row 4
    assert np.array_equal(out[:4], c0.routed_experts[:4])
    assert np.array_equal(out[4], c1.routed_experts[4])
    assert out[4].tolist() != PLACEHOLDER
    # call 1 owns tokens 5..8; the final token of the final trace keeps vLLM's placeholder
    assert np.array_equal(out[5:9], c1.routed_experts[5:9])
    assert out[8].tolist() == PLACEHOLDER


def test_final_token_of_non_final_trace_carries_sentinel():
    c0, c1 = _two_call_trace()
    out = np.zeros((9, 2, 2), dtype=np.int16)
    sentinels = fill_trace_routes(out, [c0, c1], [c0.routed_experts, c1.routed_experts], is_final_trace=False)
    assert sentinels == (8,)
    assert out[8].tolist() == SENTINEL
    assert np.array_equal(out[4], c1.routed_experts[4])  # the in-trace repair still happens


def test_call_without_routes_is_backfilled_and_previous_final_token_gets_sentinel():
    c0, c1 = _two_call_trace()
    out = np.zeros((9, 2, 2), dtype=np.int16)
    fill_trace_routes(out, [c0, c1], [c0.routed_experts, None], is_final_trace=True)
    assert np.array_equal(out[:4], c0.routed_experts[:4])
    assert out[4].tolist() == SENTINEL  # no next prefill to repair from: never the placeholder
    assert all(out[t].tolist() == SENTINEL for t in range(5, 9))


# ---------------------------------------------------------------------------------------------
# the batch


def test_boundary_route_sentinel_is_in_row_and_logical_record_and_next_trace_keeps_its_prefill():
    ev, plan = make_rollout("r0", [[(3, 2), (2, 2)], [(4, 3)]], layout=LAYOUT)
    batch = _batch([plan])
    routes = batch.routed_experts
    assert routes is not None and routes.dtype == torch.int16
    # row 0 = trace 0: calls 0 (tokens 0..4) and 1 (tokens 5..8); its last token 8 is the boundary token
    assert batch.row_sentinel_positions[0] == (8,)
    assert routes[0, 8].tolist() == SENTINEL
    # row 1 = trace 1: call 2's own prefill, untouched by the previous trace
    c2 = ev.calls[2]
    assert np.array_equal(routes[1, : c2.num_tokens - 1].numpy(), c2.routed_experts[: c2.num_tokens - 1])
    assert routes[1, c2.num_tokens - 1].tolist() == PLACEHOLDER  # end of the rollout: placeholder kept
    assert batch.row_sentinel_positions[1] == ()
    # the logical copy: sampled tokens in call order are 2 + 2 + 3; the 4th (index 3) is the boundary token
    record = batch.logical[0]
    assert record.route_sentinel_positions == (3,)
    assert record.sampled_routes is not None and record.sampled_routes.shape == (7, 2, 2)
    assert record.sampled_routes[3].tolist() == SENTINEL
    assert np.array_equal(record.sampled_routes[4:], c2.routed_experts[c2.num_tokens - 3 :])
    # the in-trace repair shows in the logical copy too: call 0's final sampled token from call 1's prefill
    assert np.array_equal(record.sampled_routes[1], ev.calls[1].routed_experts[4])


def test_logical_route_copy_is_independent_of_the_row_tensor():
    _, plan = make_rollout("r0", [[(3, 2)], [(4, 3)]], layout=LAYOUT)
    batch = _batch([plan])
    batch.routed_experts[0, 4] = 7
    assert batch.logical[0].sampled_routes[1].tolist() == SENTINEL


def test_rollouts_without_routes_are_backfilled_with_sentinel_and_padding_is_arange():
    _, routed = make_rollout("a", [[(3, 2)]], layout=LAYOUT, index=0)
    _, bare = make_rollout("b", [[(2, 1)]], index=1)
    batch = _batch([routed, bare], dp_size=3)
    routes = batch.routed_experts
    assert routes.shape == (3, 5, 2, 2)
    assert all(routes[1, t].tolist() == SENTINEL for t in range(3))  # row of "b": its 3 real tokens
    assert all(routes[1, t].tolist() == PLACEHOLDER for t in range(3, 5))  # past its length
    assert all(routes[2, t].tolist() == PLACEHOLDER for t in range(5))  # padding row


def test_batch_without_any_routes_has_none():
    _, plan = make_rollout("a", [[(3, 2)], [(1, 1)]])
    batch = _batch([plan])
    assert batch.routed_experts is None
    assert batch.row_sentinel_positions == ((), ())
    assert batch.logical[0].sampled_routes is None


def test_rows_with_different_route_layouts_are_rejected():
    _, a = make_rollout("a", [[(3, 2)]], layout=(2, 2), index=0)
    _, b = make_rollout("b", [[(3, 2)]], layout=(3, 2), index=1)
    with pytest.raises(ContractError) as info:
        _batch([a, b])
    assert info.value.code == "inconsistent_routed_expert_shapes"
    assert info.value.rollout_id == "b"
    assert "'b/trace-0' has routes [layers, topk]=[3, 2], but 'a/trace-0' has [2, 2]" in str(info.value)


def test_a_layout_mismatch_names_the_trace_that_set_the_batchs_layout():
    _, a = make_rollout("a", [[(3, 2)]], layout=(2, 2), index=0)
    _, b = make_rollout("b", [[(3, 2)]], layout=(2, 2), index=1)
    _, c = make_rollout("c", [[(3, 2)]], layout=(3, 2), index=2)
    with pytest.raises(ContractError) as info:
        _batch([a, b, c], dp_size=3)
    assert info.value.rollout_id == "c"
    assert "'c/trace-0' has routes [layers, topk]=[3, 2], but 'a/trace-0' has [2, 2]" in str(info.value)


def test_partially_routed_trace_backfills_the_unrouted_call():
    ev, plan = make_rollout("a", [[(3, 2), (2, 2)]], layout=LAYOUT, routed_calls=[1])
    batch = _batch([plan])
    routes = batch.routed_experts[0]
    assert all(routes[t].tolist() == SENTINEL for t in range(4))  # call 0 had no routes
    assert np.array_equal(routes[4].numpy(), ev.calls[1].routed_experts[4])  # repaired from call 1's prefill
