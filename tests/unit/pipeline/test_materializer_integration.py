"""Gym JSON → ingest → planner → advantages → materializer, on the reference examples and hand-built payloads."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from compactsim.harness.core import metrics as M
from compactsim.harness.core.errors import ContractError
from compactsim.harness.core.images import png_data_url
from compactsim.harness.pipeline.materializer import materialize
from compactsim.harness.pipeline.planner import plan_rollout
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.scenarios.payloads import Call, build_response, compacted_three_calls, continuing, run_result

torch.set_num_threads(1)

IMAGE = "media-e5214ee50da1954c70348ac5"


def _cfg(groups: int = 1, gens: int = 1, **policy) -> TrainerConfig:
    return TrainerConfig.model_validate(
        {
            "grpo": {"num_prompts_per_step": groups, "num_generations_per_prompt": gens},
            "policy": {"train_global_batch_size": groups * gens, "logprob_dtype": "float64", **policy},
        }
    )


def test_reference_example_materialises_two_rows_owning_the_carried_image(example_transport):
    batch = materialize([plan_rollout(run_result(example_transport, reward=1.0))], _cfg())
    assert batch.row_input_ids.tolist() == [
        [1, 2, 3, 11, 12, 4, 900, 5, 21, 22, 0, 0, 0, 0],
        [1, 2, 3, 12, 4, 900, 5, 21, 22, 6, 7, 31, 32, 33],
    ]
    assert batch.row_mask_spans == (((3, 5), (8, 10)), ((11, 14),))
    assert batch.row_generation_logprobs[0, :10].tolist() == [0, 0, 0, -0.5, -0.25, 0, 0, 0, -0.125, -1.0]
    assert batch.row_generation_logprobs[1, 11:].tolist() == [-0.1, -0.2, -0.3]
    assert batch.row_media_ids == ((IMAGE,), (IMAGE,))
    assert batch.row_pixel_values[0][0] is batch.row_pixel_values[1][0]
    assert batch.row_physical_trace_id == ("rollout-demo-0/trace-0", "rollout-demo-0/trace-1")
    assert batch.metrics()[M.TOTAL_NUM_TOKENS] == 24


def test_pr2870_shape_materialises_exactly_like_the_070_shape(example_transport, example_pr2870):
    a = materialize([plan_rollout(run_result(example_transport, reward=1.0))], _cfg())
    b = materialize([plan_rollout(run_result(example_pr2870, reward=1.0))], _cfg())
    for name in ("row_input_ids", "row_token_mask", "row_generation_logprobs", "row_advantages", "parent_indices"):
        assert torch.equal(getattr(a, name), getattr(b, name))
    assert a.metrics() == b.metrics()


def test_bare_response_without_reward_cannot_be_trained(example_transport):
    with pytest.raises(ContractError) as info:
        materialize([plan_rollout(example_transport)], _cfg())
    assert info.value.code == "malformed_payload"
    assert info.value.rollout_id == "rollout-demo-0"


def _group_results(rewards, *, mask=(), **build):
    results = []
    for i, r in enumerate(rewards):
        c1 = Call([1, 2, 3], [11 + i, 12])
        c2 = continuing(c1, [4, 5], [21, 22 + i])
        c3 = Call([1, 2, 3, 9, 21, 22 + i, 6], [31, 32, 33 + i], boundary=True) if i % 2 == 0 else continuing(c2, [6], [31])
        response = build_response([c1, c2, c3], rollout_id=f"r{i}", rollout_index=i, **build)
        results.append(run_result(response, reward=r, mask_sample=i in mask))
    return results


def test_group_through_the_planner_broadcasts_each_parents_advantage():
    plans = [plan_rollout(r) for r in _group_results([0.0, 1.0, 0.0, 1.0], mask=(3,))]
    batch = materialize(plans, _cfg(gens=4, dp_size=4))
    assert batch.parent_indices.tolist() == [0, 0, 1, 2, 2, 3, -1, -1]
    adv = [r.advantage for r in batch.logical]
    s = np.sqrt(1 / 3) + 1e-6
    assert adv == pytest.approx([-2 / 3 / s, 2 / 3 / s] * 2, rel=1e-12)
    for row, parent in enumerate(batch.parent_indices.tolist()[:6]):
        mask = batch.row_token_mask[row] > 0
        assert torch.all(batch.row_advantages[row][mask] == adv[parent])
    assert batch.row_sample_mask.tolist() == [1, 1, 1, 1, 1, 0, 0, 0]
    m = batch.metrics()
    assert (m[M.NUM_SPLIT_ROLLOUTS], m[M.NUM_PADDING_ROWS], m[M.NUM_MASK_SAMPLE_FILTERED]) == (2, 2, 1)


def test_overlapping_media_across_a_boundary_are_all_owned_by_the_new_trace():
    response = compacted_three_calls()  # ["screen-a"] → ["screen-a", "screen-b"]
    response["media_assets"]["screen-a"]["source_part"]["image_url"] = png_data_url(np.full((1, 2, 3), 30, np.uint8))
    response["media_assets"]["screen-b"]["source_part"]["image_url"] = png_data_url(np.full((1, 2, 3), 90, np.uint8))
    batch = materialize([plan_rollout(run_result(response, reward=1.0))], _cfg())
    assert batch.row_media_ids == (("screen-a",), ("screen-a", "screen-b"))
    (a0,), (a1, b1) = batch.row_pixel_values
    assert a1 is a0
    assert torch.equal(a1, torch.full((3, 1, 2), 30 / 255, dtype=torch.float64))
    assert torch.equal(b1, torch.full((3, 1, 2), 90 / 255, dtype=torch.float64))


def _packed(num_tokens: int, call: int, topk: int = 2, layers: int = 1) -> list:
    rows = [[[100 * call + t + k for k in range(topk)] for _ in range(layers)] for t in range(num_tokens)]
    rows[-1] = [list(range(topk)) for _ in range(layers)]  # vLLM's final-token placeholder
    return rows


def test_router_replay_through_the_planner_stamps_the_boundary_and_repairs_inside_the_trace():
    c1 = Call([1, 2, 3], [11, 12], routes=_packed(5, 1))
    c2 = continuing(c1, [4, 5], [21, 22], routes=_packed(9, 2))
    c3 = Call([1, 2, 3, 9, 21, 22, 6], [31, 32, 33], boundary=True, routes=_packed(10, 3))
    batch = materialize([plan_rollout(run_result(build_response([c1, c2, c3]), reward=1.0))], _cfg())
    routes = batch.routed_experts
    assert routes.shape == (2, 10, 1, 2)
    assert routes[0, 4].tolist() == [[204, 205]]  # call 1's final token repaired from call 2's prefill row 4
    assert routes[0, 8].tolist() == [[-1, -1]]  # boundary: sentinel, not the placeholder, not call 3's rows
    assert routes[0, 9].tolist() == [[0, 1]]  # past the row's end: arange(K)
    assert routes[1, :9].tolist() == [[[300 + t, 301 + t]] for t in range(9)]  # trace 1 keeps its own prefill
    assert routes[1, 9].tolist() == [[0, 1]]
    assert batch.row_sentinel_positions == ((8,), ())
    assert batch.logical[0].route_sentinel_positions == (3,)
    assert batch.logical[0].sampled_routes[3].tolist() == [[-1, -1]]


def test_sync_batch_of_two_policy_versions_is_rejected_through_the_planner():
    results = []
    for i, version in enumerate([1, 2]):
        calls = [Call([1, 2], [3], policy_version=version)]
        results.append(run_result(build_response(calls, rollout_id=f"r{i}", group_id=f"g{i}", task_id=f"t{i}"), 1.0))
    with pytest.raises(ContractError) as info:
        materialize([plan_rollout(r) for r in results], _cfg(groups=2))
    assert info.value.code == "mixed_policy_versions"
