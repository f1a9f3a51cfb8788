"""Materializer properties over random batches of rollouts built from a known segmentation."""

from __future__ import annotations

import math

import torch
from hypothesis import given
from hypothesis import strategies as st

from compactsim.harness.core.trace_plan import TracePlan
from compactsim.harness.pipeline.advantages import compute_logical_advantages
from compactsim.harness.pipeline.materializer import prepare_trace_batch
from compactsim.harness.pipeline.train_config import MaterializeConfig
from tests.unit.pipeline.materializer_builders import make_rollout

torch.set_num_threads(1)

ROW_FIELDS = ("row_input_ids", "row_token_mask", "row_generation_logprobs", "row_advantages", "routed_experts")


@st.composite
def segments(draw: st.DrawFn) -> list[list[tuple[int, int]]]:
    """1-3 physical segments of 1-3 calls; at least one sampled token in the rollout."""
    out = []
    for k in range(draw(st.integers(1, 3))):
        seg = []
        for j in range(draw(st.integers(1, 3))):
            delta = draw(st.integers(1 if (k, j) == (0, 0) else 0, 4))
            seg.append((delta, draw(st.integers(0, 3))))
        out.append(seg)
    if all(s == 0 for seg in out for _, s in seg):
        out[-1][-1] = (out[-1][-1][0], 1)
    return out


@st.composite
def batches(draw: st.DrawFn) -> list[TracePlan]:
    """1-3 groups of 1-3 rollouts each, with or without routes, some flagged mask_sample."""
    routed = draw(st.booleans())
    plans = []
    for g in range(draw(st.integers(1, 3))):
        for i in range(draw(st.integers(1, 3))):
            plans.append(
                make_rollout(
                    f"g{g}-r{i}",
                    draw(segments()),
                    group=f"g{g}",
                    index=i,
                    reward=draw(st.sampled_from([0.0, 0.25, 1.0, 3.0])),
                    mask_sample=draw(st.booleans()),
                    layout=(2, 2) if routed else None,
                    routed_calls=None if draw(st.booleans()) else [0, 2, 3],
                )[1]
            )
    return plans


configs = st.builds(
    MaterializeConfig,
    dp_size=st.integers(1, 3),
    micro_batch_size=st.integers(1, 2),
    make_sequence_length_divisible_by=st.sampled_from([1, 4, 8]),
    logprob_dtype=st.just("float64"),
)


def _batch(plans, cfg=MaterializeConfig(logprob_dtype="float64")):
    logical = compute_logical_advantages([p.evidence for p in plans])
    return prepare_trace_batch(plans, None, logical, cfg)


@given(batches(), configs)
def test_each_sampled_token_is_trainable_in_exactly_one_row(plans, cfg):
    batch = _batch(plans, cfg)
    for rec in batch.logical:
        ev = next(p.evidence for p in plans if p.rollout_id == rec.rollout_id)
        expected_ids = [t for c in ev.calls for t in c.sampled_token_ids]
        expected_lps = [lp for c in ev.calls for lp in c.sampled_logprobs]
        rows = (batch.parent_indices == rec.index).nonzero().flatten().tolist()
        assert tuple(rows) == rec.row_indices
        on = batch.row_token_mask[rows] > 0
        assert int(on.sum()) == len(expected_ids) == rec.num_sampled_tokens
        assert batch.row_input_ids[rows][on].tolist() == expected_ids
        assert batch.row_generation_logprobs[rows][on].tolist() == expected_lps
    padding = batch.parent_indices < 0
    assert int((batch.row_token_mask[padding] != 0).sum()) == 0


@given(batches(), configs)
def test_masked_advantages_sum_to_logical_advantage_times_sampled_count(plans, cfg):
    batch = _batch(plans, cfg)
    total = float((batch.row_advantages * batch.row_token_mask).sum())
    expected = math.fsum(r.advantage * r.num_sampled_tokens for r in batch.logical)
    assert math.isclose(total, expected, rel_tol=1e-12, abs_tol=1e-9)
    # nothing off the mask
    assert float((batch.row_advantages * (1 - batch.row_token_mask)).abs().sum()) == 0.0


@given(batches(), configs)
def test_padding_never_changes_any_real_row(plans, cfg):
    plain = _batch(plans)
    padded = _batch(plans, cfg)
    n, s = plain.num_rows, plain.seq_len
    assert torch.equal(padded.parent_indices[:n], plain.parent_indices)
    for name in ROW_FIELDS:
        a, b = getattr(padded, name), getattr(plain, name)
        if b is None:
            assert a is None
            continue
        assert torch.equal(a[:n, :s], b), name
        assert int((padded.row_token_mask[:, s:] != 0).sum()) == 0
    assert padded.row_input_lengths[:n].tolist() == plain.row_input_lengths.tolist()
    assert padded.metrics()["total_num_tokens"] == plain.metrics()["total_num_tokens"]
    assert padded.num_rows % (cfg.dp_size * cfg.micro_batch_size) == 0
    assert padded.seq_len % cfg.make_sequence_length_divisible_by == 0


@given(batches(), st.randoms(use_true_random=False))
def test_rows_are_identical_whatever_order_rollouts_arrive_in(plans, random):
    shuffled = list(plans)
    random.shuffle(shuffled)
    a, b = _batch(plans), _batch(shuffled)
    for name in ROW_FIELDS + ("parent_indices", "row_sample_mask", "row_input_lengths"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None and y is None) or torch.equal(x, y), name
    assert a.row_physical_trace_id == b.row_physical_trace_id
    assert a.metrics() == b.metrics()


@given(batches())
def test_every_non_final_trace_ends_on_the_sentinel_in_row_and_logical_copy(plans):
    batch = _batch(plans)
    if batch.routed_experts is None:
        return
    for r in range(batch.num_real_rows):
        length = int(batch.row_input_lengths[r])
        rec = batch.logical[int(batch.parent_indices[r])]
        is_final = r == rec.row_indices[-1]
        assert batch.row_sentinel_positions[r] == (() if is_final else (length - 1,))
        if not is_final:
            assert batch.routed_experts[r, length - 1].eq(-1).all()
        assert (batch.routed_experts[r, length:] == torch.arange(2, dtype=batch.routed_experts.dtype)).all()
    for rec in batch.logical:
        for pos in rec.route_sentinel_positions:
            assert (rec.sampled_routes[pos] == -1).all()
