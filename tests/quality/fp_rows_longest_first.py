"""A CORRECT backend: real rows reordered longest first before dispatch (false-positive hunt 4).

veRL's sequence-length balancing and dynamic batching reorder a batch's rows by length before splitting it over ranks
and micro-batches. Every per-row field moves with its row, `parent_indices` keep naming the canonical logical records
(whose `row_indices` follow), and padding rows stay last. Nothing in the loss depends on row order, and the audit
pairs rows by physical trace id: in `layout-dp2-microbatch2-mask-sample` the reorder also puts a rollout's later,
longer trace ahead of its first, and moves masked rows to other ranks and micro-batches.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend

SCENARIO = "layout-dp2-microbatch2-mask-sample"


def permuted(batch: TraceBatch, order: list[int]) -> TraceBatch:
    """`batch` with its rows in `order` (a permutation of its row indices): every per-row field moved alike."""
    idx = torch.as_tensor(order, dtype=torch.long)
    parents = batch.parent_indices[idx]
    rows_of: dict[int, list[int]] = {}
    for row, parent in enumerate(parents.tolist()):
        rows_of.setdefault(parent, []).append(row)
    logical = tuple(replace(rec, row_indices=tuple(rows_of.get(rec.index, ()))) for rec in batch.logical)
    tensors = {name: getattr(batch, name)[idx] for name in (
        "row_input_ids", "row_input_lengths", "row_token_mask", "row_generation_logprobs", "row_advantages",
        "row_sample_mask", "row_trace_index", "row_generation_policy_version")}
    tuples = {name: tuple(getattr(batch, name)[i] for i in order) for name in (
        "row_logical_rollout_id", "row_physical_trace_id", "row_mask_spans", "row_media_ids", "row_pixel_values",
        "row_sentinel_positions")}
    routes = None if batch.routed_experts is None else batch.routed_experts[idx]
    return replace(batch, **tensors, **tuples, parent_indices=parents, routed_experts=routes, logical=logical)


class Backend(ReferenceBackend):
    name = "fp-rows-longest-first"

    def materialize(self, plans, cfg):
        batch = super().materialize(plans, cfg)
        real = [r for r in range(batch.num_rows) if int(batch.parent_indices[r]) >= 0]
        padding = [r for r in range(batch.num_rows) if int(batch.parent_indices[r]) < 0]
        return permuted(batch, sorted(real, key=lambda r: (-int(batch.row_input_lengths[r]), r)) + padding)
