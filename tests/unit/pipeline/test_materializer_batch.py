"""`TraceBatch` invariants: parent_indices is validated, padding comes last, ids follow parents."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from compactsim.harness.core.batch import validate_parent_indices
from compactsim.harness.pipeline.advantages import compute_logical_advantages
from compactsim.harness.pipeline.batch_metrics import batch_metrics, step_metrics
from compactsim.harness.pipeline.materializer import prepare_trace_batch
from compactsim.harness.pipeline.train_config import MaterializeConfig
from tests.unit.pipeline.materializer_builders import make_rollout

torch.set_num_threads(1)


def _batch(dp_size: int = 1):
    plans = [
        make_rollout("a", [[(2, 1)], [(1, 1)]], reward=0.0, index=0)[1],
        make_rollout("b", [[(3, 2)]], reward=1.0, index=1)[1],
    ]
    logical = compute_logical_advantages([p.evidence for p in plans])
    return prepare_trace_batch(plans, None, logical, MaterializeConfig(dp_size=dp_size))


def test_parent_indices_accept_real_rows_then_padding():
    validate_parent_indices(torch.tensor([0, 0, 1, -1]), 2)


def test_parent_index_out_of_range_is_rejected():
    with pytest.raises(ValueError, match=r"parent_indices\[2\]=2: expected -1 \(padding\) or an index in \[0, 2\)"):
        validate_parent_indices(torch.tensor([0, 1, 2]), 2)


def test_parent_index_below_minus_one_is_rejected():
    with pytest.raises(ValueError, match=r"parent_indices\[0\]=-2"):
        validate_parent_indices(torch.tensor([-2, 0, 1]), 2)


def test_real_row_after_padding_is_rejected():
    with pytest.raises(ValueError, match=r"parent_indices\[2\]=1 follows a padding row"):
        validate_parent_indices(torch.tensor([0, -1, 1]), 2)


def test_rollout_without_a_row_is_rejected():
    with pytest.raises(ValueError, match=r"logical rollouts \[1\] own no row"):
        validate_parent_indices(torch.tensor([0, 0, -1]), 2)


def test_batch_rejects_parent_indices_that_disagree_with_row_ids():
    batch = _batch()
    with pytest.raises(ValueError, match="row 0: logical_rollout_id 'a' differs from its parent 'b'"):
        replace(batch, parent_indices=torch.tensor([1, 0, 1]))


def test_batch_rejects_a_padding_row_with_an_id():
    batch = _batch(dp_size=2)
    ids = batch.row_logical_rollout_id[:3] + ("a",)
    with pytest.raises(ValueError, match="row 3: parent_indices=-1 but logical_rollout_id='a'"):
        replace(batch, row_logical_rollout_id=ids)


def test_batch_rejects_rows_not_divisible_by_dp_times_microbatch():
    batch = _batch()
    with pytest.raises(ValueError, match="3 rows are not divisible by dp_size 2 × micro_batch_size 1"):
        replace(batch, dp_size=2)


def test_batch_rejects_mismatched_tensor_shapes():
    batch = _batch()
    with pytest.raises(ValueError, match=r"row_token_mask has shape \(3, 4\); row_input_ids is \(3, 5\)"):
        replace(batch, row_token_mask=batch.row_token_mask[:, :4])


def test_step_metrics_merge_trainer_metrics_without_overwriting_batch_metrics():
    batch = _batch()
    merged = step_metrics(batch, {"loss": 0.5})
    assert merged["loss"] == 0.5 and merged == {**batch_metrics(batch), "loss": 0.5}
    with pytest.raises(ValueError, match=r"trainer metrics \['total_num_tokens'\] would overwrite batch metrics"):
        step_metrics(batch, {"total_num_tokens": 3})


def test_batch_moves_to_a_device_unchanged():
    batch = _batch(dp_size=2)
    moved = batch.to("cpu")
    assert torch.equal(moved.row_input_ids, batch.row_input_ids)
    assert moved.metrics() == batch.metrics()


def test_batch_rejects_a_padding_row_that_carries_loss_weight():
    batch = _batch(dp_size=2)
    sample_mask = batch.row_sample_mask.clone()
    sample_mask[3] = 1.0
    with pytest.raises(ValueError, match="padding row 3 has a non-zero mask, advantage or sample_mask, or more than "
                                         "one token"):
        replace(batch, row_sample_mask=sample_mask)


@pytest.mark.parametrize(("length", "accepted"), [(1, True), (2, False)])
def test_a_padding_row_may_hold_one_pad_token_as_nemo_rls_trace_batch_writes_it(length: int, accepted: bool):
    batch = _batch(dp_size=2)
    lengths = batch.row_input_lengths.clone()
    lengths[3] = length
    if accepted:
        assert replace(batch, row_input_lengths=lengths).metrics() == batch.metrics()  # total_num_tokens: real rows only
    else:
        with pytest.raises(ValueError, match="padding row 3 .* more than one token"):
            replace(batch, row_input_lengths=lengths)
