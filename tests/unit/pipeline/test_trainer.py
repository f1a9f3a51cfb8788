"""The GRPO step: recomputed logprobs, loss vs an independent computation, dp/microbatch invariance, step counts."""

from __future__ import annotations

import copy
from collections import defaultdict
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import torch

from compactsim.harness.core import metrics as M
from compactsim.harness.core.errors import ConfigError, ContractError
from compactsim.harness.core.policy import TinyPolicy, configure_determinism
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.materializer import materialize
from compactsim.harness.pipeline.planner import plan_rollout
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState, check_batch, grpo_step, init_train_state, train_step
from tests.unit.pipeline.reference_loss import independent_grpo_loss, loo_grpo_advantages, plain_rows_from_ground_truth
from tests.unit.pipeline.trainer_builders import collect_rollouts, flatten_rollouts, make_cfg, permute_rows

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")


@pytest.fixture(scope="module", autouse=True)
def _deterministic_torch() -> None:
    configure_determinism(1)


@pytest.fixture(scope="module")
def k2() -> list[Any]:
    """Two groups of two policy-mode rollouts, image recency K=2: each rollout compacts once (8 rows)."""
    return collect_rollouts("pr-validation-image-compaction-k2")


@pytest.fixture(scope="module")
def flat() -> list[Any]:
    """The same task without compaction (4 rows)."""
    return collect_rollouts("pr-validation-no-compaction")


def _batch(collected: list[Any], cfg: TrainerConfig):
    return materialize([plan_rollout(c.result) for c in collected], cfg)


def _two_steps(collected: list[Any], cfg: TrainerConfig, perm: list[int] | None = None) -> tuple[StepResult, TrainState]:
    """Two steps on the same batch: the second has a non-zero loss (KL to the reference, IS weights)."""
    batch = _batch(collected, cfg)
    if perm is not None:
        batch = permute_rows(batch, perm)
    state = init_train_state(cfg)
    train_step(state, batch, cfg)
    return train_step(state, batch, cfg), state


def _max_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(float((x.detach() - y.detach()).abs().max()) for x, y in zip(a, b, strict=True))


# ---------------------------------------------------------------------------------------------- logprobs


def test_train_step_recomputes_generation_logprobs_to_float64_precision(k2):
    cfg = make_cfg()
    batch = _batch(k2, cfg)
    result = train_step(init_train_state(cfg), batch, cfg)
    on = batch.row_token_mask > 0
    assert float((result.prev_logprobs - batch.row_generation_logprobs)[on].abs().max()) <= 1e-12
    n = batch.global_valid_tokens()
    # exp(|Δ|) = 1 on every token, so the metric is exactly NeMo's N / (N + 1e-8)
    assert abs(result.metrics[M.TOKEN_MULT_PROB_ERROR] - n / (n + 1e-8)) <= 1e-12
    assert abs(result.metrics[M.TOKEN_MULT_PROB_ERROR] - 1.0) <= 1e-9


@pytest.mark.parametrize("layout", [{}, {"policy": {"dp_size": 2, "train_micro_batch_size": 1}}], ids=["dp1", "dp2-mb1"])
def test_prev_logprobs_equal_a_separate_no_grad_pass_bit_for_bit(k2, layout):
    """`prev` comes from the training forwards, detached; NeMo-RL's separate no-grad pass over the same
    microbatches, on the weights before the step, must give the very same numbers (the docstring's claim)."""
    from compactsim.harness.pipeline.trainer import _all_logprobs, _row_images

    cfg = make_cfg(overrides=layout)
    batch = _batch(k2, cfg)
    state = init_train_state(cfg)
    before = copy.deepcopy(state.policy)
    microbatches = [(rank, rows) for rank in range(batch.dp_size) for rows in batch.microbatch_rows(rank)]
    routes = batch.routed_experts if cfg.policy.router_replay_enabled else None
    separate = _all_logprobs(before, batch, microbatches, _row_images(batch, dtype=state.dtype, device=state.device), routes)
    result = train_step(state, batch, cfg)
    assert torch.equal(result.prev_logprobs, separate)
    assert not torch.equal(dict(state.policy.named_parameters())["lm_head.weight"], before.lm_head.weight)  # it trained


@pytest.mark.parametrize("layout", [{}, {"policy": {"dp_size": 2, "train_micro_batch_size": 1}}], ids=["dp1", "dp2-mb1"])
def test_reference_logprobs_skip_their_pass_only_while_the_weights_are_the_reference_s_and_match_it_bit_for_bit(
        k2, layout, monkeypatch):
    """While the reference's weights are the policy's (step 0), the training forwards stand in for the reference
    pass (the docstring's claim): the same artifact and metrics as the separate pass, which step 1 takes again."""
    from compactsim.harness.pipeline import trainer

    cfg = make_cfg(overrides=layout)
    assert cfg.loss_fn.reference_policy_kl_penalty != 0
    batch = _batch(k2, cfg)
    passes: list[int] = []
    separate_pass = trainer._all_logprobs
    monkeypatch.setattr(trainer, "_all_logprobs", lambda *a, **k: passes.append(1) or separate_pass(*a, **k))
    fast_state = init_train_state(cfg)
    fast = [train_step(fast_state, batch, cfg) for _ in range(2)]
    assert passes == [1]  # step 1 only: the weights moved away from the reference at step 0

    monkeypatch.setattr(trainer, "_same_weights", lambda a, b: False)
    slow_state = init_train_state(cfg)
    slow = [train_step(slow_state, batch, cfg) for _ in range(2)]
    assert passes == [1, 1, 1]
    for f, s in zip(fast, slow, strict=True):
        assert f.metrics == s.metrics
        assert f.artifact.arrays.keys() == s.artifact.arrays.keys() and "row_reference_logprobs" in f.artifact.arrays
        for name, array in f.artifact.arrays.items():
            assert np.array_equal(array, s.artifact.arrays[name]), name
    step0 = fast[0].artifact.arrays
    assert np.array_equal(step0["row_reference_logprobs"], step0["row_prev_logprobs"])  # the policy is the reference
    assert not np.array_equal(fast[1].artifact.arrays["row_reference_logprobs"], fast[1].artifact.arrays["row_prev_logprobs"])
    for (name, a), b in zip(fast_state.policy.named_parameters(), slow_state.policy.parameters(), strict=True):
        assert torch.equal(a, b), name


def test_same_weights_is_bit_identity_of_every_parameter_and_buffer():
    from compactsim.harness.pipeline.trainer import _same_weights

    a = TinyPolicy.from_seed(0, dtype=torch.float64)
    b = copy.deepcopy(a)
    assert _same_weights(a, b)
    with torch.no_grad():
        b.lm_head.bias[0] = torch.nextafter(b.lm_head.bias[0], torch.tensor(1.0, dtype=torch.float64))
    assert not _same_weights(a, b)
    with torch.no_grad():
        a.lm_head.bias[0] = float("nan")
    assert not _same_weights(a, a)  # NaN is never equal, so a diverged reference is always recomputed
    assert not _same_weights(a, TinyPolicy.from_seed(0, dtype=torch.float64).blocks[0])
    single = TinyPolicy.from_seed(0, dtype=torch.float32)
    assert not _same_weights(single, copy.deepcopy(single).to(torch.float64))  # equal values, another dtype: not the same


def test_train_step_recomputes_generation_logprobs_within_1e5_in_float32():
    collected = collect_rollouts("pr-validation-image-compaction-k2", dtype="float32")
    cfg = make_cfg(dtype="float32")
    result = train_step(init_train_state(cfg), _batch(collected, cfg), cfg)
    assert result.prev_logprobs.dtype == torch.float32
    assert abs(result.metrics[M.TOKEN_MULT_PROB_ERROR] - 1.0) <= 1e-5


def test_train_step_without_router_replay_uses_the_router_and_records_no_routes(k2):
    cfg = make_cfg(overrides={"policy": {"router_replay_enabled": False}})
    result = train_step(init_train_state(cfg), _batch(k2, cfg), cfg)
    assert "routed_experts" not in result.artifact.arrays
    assert abs(result.metrics[M.TOKEN_MULT_PROB_ERROR] - 1.0) <= 1e-9


# ---------------------------------------------------------------------------------------------- loss


def test_train_step_loss_and_gradients_equal_an_independent_computation_from_ground_truth_rows(k2):
    cfg = make_cfg(overrides={"loss_fn": {"use_importance_sampling_correction": True}, "policy": {"max_grad_norm": None}})
    batch = _batch(k2, cfg)
    state = init_train_state(cfg)
    train_step(state, batch, cfg)  # version 1: generation logprobs (version 0) now differ from the trainer's
    weights = copy.deepcopy(state.policy)
    result = train_step(state, batch, cfg)

    rewards: dict[str, list[float]] = defaultdict(list)
    for c in k2:
        rewards[c.ground_truth["rollout"]["group_id"]].append(c.ground_truth["outcome"]["reward"])
    rows = []
    for c in k2:
        gt = c.ground_truth
        group = rewards[gt["rollout"]["group_id"]]
        advantage = loo_grpo_advantages(group)[gt["rollout"]["rollout_index"]]
        rows += plain_rows_from_ground_truth(gt, advantage)
    assert len(rows) == batch.num_real_rows == 8
    expected = independent_grpo_loss(
        weights, rows, reference=TinyPolicy.from_seed(0, dtype=torch.float64), kl_beta=0.01, importance_sampling=True
    )
    expected.backward()

    assert abs(expected.item()) > 1e-5  # the KL and IS terms make the comparison non-trivial
    assert abs(result.metrics["loss"] - expected.item()) <= 1e-12
    ours = [p.grad for p in state.policy.parameters()]
    independent = [p.grad if p.grad is not None else torch.zeros_like(p) for p in weights.parameters()]
    assert _max_diff(ours, independent) <= 1e-12


def test_grpo_step_equals_plan_materialize_and_train_step_through_the_reference_backend(k2):
    cfg = make_cfg()
    direct = grpo_step(init_train_state(cfg), [c.result for c in k2], cfg)
    backend = ReferenceBackend()
    state = init_train_state(cfg)
    via = backend.train_step(state, backend.materialize([backend.plan(c.result) for c in k2], cfg), cfg)
    assert direct.metrics == via.metrics
    assert torch.equal(direct.prev_logprobs, via.prev_logprobs)


# ---------------------------------------------------------------------------------------------- dp / microbatches


@pytest.fixture(scope="module")
def baseline(k2) -> tuple[StepResult, TrainState]:
    return _two_steps(k2, make_cfg())


@pytest.mark.parametrize(
    ("dp_size", "micro_batch_size", "perm"),
    [
        (1, 1, [7, 3, 5, 1, 0, 2, 6, 4]),
        (2, 1, None),
        (1, 2, None),
        (2, 2, [1, 0, 3, 2, 5, 4, 7, 6]),
        (4, 1, None),
        (3, 1, None),  # 9 rows: one padding row
        (1, 3, None),
    ],
)
def test_train_step_is_invariant_to_row_order_dp_size_and_micro_batch_size(k2, baseline, dp_size, micro_batch_size, perm):
    base, base_state = baseline
    cfg = make_cfg(overrides={"policy": {"dp_size": dp_size, "train_micro_batch_size": micro_batch_size}})
    result, state = _two_steps(k2, cfg, perm)
    assert result.batch.num_rows % (dp_size * micro_batch_size) == 0
    assert abs(result.metrics["loss"] - base.metrics["loss"]) <= 1e-12
    assert abs(result.metrics[M.GRAD_NORM] - base.metrics[M.GRAD_NORM]) <= 1e-12
    assert abs(result.metrics[M.TOKEN_MULT_PROB_ERROR] - base.metrics[M.TOKEN_MULT_PROB_ERROR]) <= 1e-12
    assert result.metrics[M.GLOBAL_VALID_TOKENS] == base.metrics[M.GLOBAL_VALID_TOKENS]
    assert _max_diff([p.grad for p in state.policy.parameters()], [p.grad for p in base_state.policy.parameters()]) <= 1e-12
    # Adam divides by sqrt(v) + 1e-8, so a ~1e-17 gradient difference on a tiny gradient moves a
    # weight by up to ~lr·1e-9; measured ≤ 4e-13 here
    assert _max_diff(list(state.policy.parameters()), list(base_state.policy.parameters())) <= 1e-12


# ---------------------------------------------------------------------------------------------- step counting


def test_compacted_batch_takes_one_optimizer_step_and_one_scheduler_increment_like_the_flat_batch(k2, flat):
    cfg = make_cfg(overrides={"policy": {"lr_warmup_steps": 4}})
    seen = {}
    for name, collected in (("flat", flat), ("k2", k2)):
        state = init_train_state(cfg)
        result = train_step(state, _batch(collected, cfg), cfg)
        adam_steps = {int(s["step"]) for s in state.optimizer.state.values()}
        seen[name] = (result.batch.num_real_rows, state.optimizer_steps, state.scheduler_steps, adam_steps,
                      result.metrics[M.LR], state.optimizer.param_groups[0]["lr"])
    assert seen["flat"] == (4, 1, 1, {1}, 0.00025, 0.0005)
    assert seen["k2"] == (8, 1, 1, {1}, 0.00025, 0.0005)


def test_train_step_metrics_report_counts_versions_and_every_loss_metric(k2):
    cfg = make_cfg()
    state = init_train_state(cfg, version=5)
    result = train_step(state, _batch(k2, cfg), cfg)
    m = result.metrics
    assert (result.trained_version, result.new_version, state.version) == (5, 6, 6)
    assert m[M.TRAINED_POLICY_VERSION] == 5
    assert (m[M.OPTIMIZER_STEP_COUNT], m[M.SCHEDULER_STEP_COUNT]) == (1, 1)
    # counted from the optimizer's and scheduler's own state; a sample-counting scheduler would get the 4 rollouts
    assert (m[M.OPTIMIZER_STEPS], m[M.SCHEDULER_INCREMENTS], m[M.SCHEDULER_STEP_INCREMENT]) == (1, 1, 4)
    assert (result.artifact.optimizer_steps, result.artifact.scheduler_increments) == (1, 1)
    assert (m[M.NUM_PHYSICAL_ROWS], m[M.NUM_LOGICAL_ROLLOUTS], m[M.NUM_SPLIT_ROLLOUTS]) == (8, 4, 4)
    for key in ("loss", "kl_penalty", "probs_ratio", "probs_ratio_min", "probs_ratio_max", "gen_kl_error",
                "approx_entropy", M.GRAD_NORM, M.LR, M.GLOBAL_VALID_SEQS):
        assert key in m
    assert (m["probs_ratio_min"], m["probs_ratio"] <= 1.0, m["probs_ratio_max"]) == (1.0, True, 1.0)
    assert m[M.GLOBAL_VALID_SEQS] == 8.0


def test_train_step_artifact_records_rows_routes_logprobs_and_the_version_that_trained_each_row(k2):
    cfg = make_cfg(overrides={"policy": {"dp_size": 3}})
    batch = _batch(k2, cfg)
    result = train_step(init_train_state(cfg, version=2), batch, cfg)
    a = result.artifact.arrays
    assert a["row_trained_policy_version"].tolist() == [2] * 8 + [-1]
    assert a["row_generation_policy_version"].tolist() == [0] * 8 + [-1]
    assert a["parent_indices"].tolist() == [0, 0, 1, 1, 2, 2, 3, 3, -1]
    assert (a["row_input_ids"] == batch.row_input_ids.numpy()).all()
    assert (a["row_prev_logprobs"] == result.prev_logprobs.numpy()).all()
    assert (a["routed_experts"] == batch.routed_experts.numpy()).all()
    sentinel = batch.row_sentinel_positions[0][0]
    assert (a["routed_experts"][0, sentinel] == -1).all()
    assert result.artifact.metrics == result.metrics


# ---------------------------------------------------------------------------------------------- the check catches bugs


def test_flattening_a_compacted_rollout_into_one_sequence_makes_token_mult_prob_error_fail(k2):
    cfg = make_cfg()
    good = train_step(init_train_state(cfg), _batch(k2, cfg), cfg)
    wrong = flatten_rollouts(_batch(k2, cfg))
    assert wrong.num_rows == 4 and wrong.seq_len > good.batch.seq_len
    bad = train_step(init_train_state(cfg), wrong, cfg)
    assert abs(good.metrics[M.TOKEN_MULT_PROB_ERROR] - 1.0) <= 1e-9
    assert bad.metrics[M.TOKEN_MULT_PROB_ERROR] - 1.0 > 0.1  # measured 0.37: far outside 1e-9


def test_replaying_unrepaired_placeholder_routes_makes_token_mult_prob_error_fail(k2):
    cfg = make_cfg()
    batch = _batch(k2, cfg)
    routes = batch.routed_experts.clone()
    for row in range(batch.num_real_rows):
        for _, end in batch.row_mask_spans[row][:-1]:  # last sampled token of every non-final call
            routes[row, end - 1] = torch.arange(routes.shape[-1], dtype=routes.dtype)
    bad = train_step(init_train_state(cfg), replace(batch, routed_experts=routes), cfg)
    assert bad.metrics[M.TOKEN_MULT_PROB_ERROR] - 1.0 > 1e-3  # measured 4.4e-3


# ---------------------------------------------------------------------------------------------- refusals


def test_train_step_rejects_a_sync_batch_mixing_generation_versions(k2):
    cfg = make_cfg()
    batch = _batch(k2, cfg)
    versions = batch.row_generation_policy_version.clone()
    versions[4:8] = 1
    with pytest.raises(ContractError) as err:
        train_step(init_train_state(cfg), replace(batch, row_generation_policy_version=versions), cfg)
    assert err.value.code == "mixed_policy_versions"
    assert "one sync optimizer batch mixes generation policy versions [0, 1]" in err.value.detail


def test_train_step_rejects_a_batch_materialized_for_another_geometry(k2):
    batch = _batch(k2, make_cfg())
    cfg = make_cfg(overrides={"policy": {"dp_size": 2}})
    with pytest.raises(ConfigError) as err:
        train_step(init_train_state(cfg), batch, cfg)
    assert err.value.code == "invalid_argument"
    assert "batch was materialized for dp_size=1, micro_batch_size=1" in err.value.detail


def test_train_step_rejects_a_batch_claiming_several_optimizer_steps(k2):
    cfg = make_cfg()
    with pytest.raises(ConfigError) as err:
        train_step(init_train_state(cfg), replace(_batch(k2, cfg), optimizer_steps=2), cfg)
    assert "one logical batch is exactly one optimizer step" in err.value.detail


def test_train_step_refuses_router_replay_without_recorded_routes(k2):
    cfg = make_cfg(overrides={"policy": {"router_replay_enabled": True}})
    with pytest.raises(ContractError) as err:
        train_step(init_train_state(cfg), replace(_batch(k2, cfg), routed_experts=None), cfg)
    assert err.value.code == "missing_routed_experts"
    assert "no call of this batch recorded routed experts" in err.value.detail


def test_train_step_refuses_router_replay_when_one_call_recorded_no_routes(k2):
    cfg = make_cfg(overrides={"policy": {"router_replay_enabled": True}})
    batch = _batch(k2, cfg)
    second = replace(batch.logical[1], route_less_turns=(2, 4))
    batch = replace(batch, logical=(batch.logical[0], second, *batch.logical[2:]))
    with pytest.raises(ContractError) as err:
        train_step(init_train_state(cfg), batch, cfg)
    assert (err.value.code, err.value.rollout_id, err.value.turn_id) == ("missing_routed_experts", second.rollout_id, 2)
    off = make_cfg(overrides={"policy": {"router_replay_enabled": False}})
    check_batch(batch, off)  # replay off: the route-less call trains on -1


def test_train_step_refuses_a_row_longer_than_the_sequence_cap(k2):
    cfg = make_cfg(overrides={"policy": {"max_total_sequence_length": 100}})
    batch = _batch(k2, cfg)
    first = int((batch.row_input_lengths > 100).nonzero()[0])
    with pytest.raises(ContractError) as err:
        train_step(init_train_state(cfg), batch, cfg)
    assert (err.value.code, err.value.rollout_id) == ("sequence_too_long", batch.row_logical_rollout_id[first])
    assert f"has {int(batch.row_input_lengths[first])} tokens; policy.max_total_sequence_length is 100" in err.value.detail


def test_init_train_state_rejects_async_without_importance_sampling_correction():
    with pytest.raises(ConfigError) as err:
        make_cfg(async_mode=True, overrides={"loss_fn": {"use_importance_sampling_correction": False}})
    assert err.value.code == "unsupported_config"
    assert any("requires loss_fn.use_importance_sampling_correction=True" in v for v in err.value.violations)
