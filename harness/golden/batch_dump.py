"""Write a `TraceBatch`'s rows as rows-dump lines: how compactsim's own pipeline (or any Backend) fills the dump.

Every field of the rows dump is written: unpadded tokens, the mask as `token_mask`, behaviour
logprobs and advantages per token, the logical advantage, sample mask, policy version, image
history with pixel digests, the boundary sentinel positions and, when the batch carries routes,
the replayed routes of every token. Padding rows are written too (``parent_index: -1``, no
tokens).
"""

from __future__ import annotations

from typing import Any

from compactsim.harness.audit.observed import rgb_pixel_digest
from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.golden.routes_field import routes_json


def batch_dump_lines(batch: TraceBatch, *, scenario: str, step: int) -> list[dict[str, Any]]:
    """One rows-dump line per row of `batch`, in batch order."""
    ids = batch.row_input_ids.detach().cpu()
    lengths = batch.row_input_lengths.detach().cpu().tolist()
    mask = batch.row_token_mask.detach().cpu()
    logprobs = batch.row_generation_logprobs.detach().cpu().double()
    advantages = batch.row_advantages.detach().cpu().double()
    parents = batch.parent_indices.detach().cpu().tolist()
    traces = batch.row_trace_index.detach().cpu().tolist()
    samples = batch.row_sample_mask.detach().cpu().double().tolist()
    versions = batch.row_generation_policy_version.detach().cpu().tolist()
    routes = None if batch.routed_experts is None else batch.routed_experts.detach().cpu().numpy()
    lines: list[dict[str, Any]] = []
    for r in range(batch.num_rows):
        n = int(lengths[r])
        parent = int(parents[r])
        line: dict[str, Any] = {
            "scenario": scenario,
            "step": step,
            "physical_trace_id": batch.row_physical_trace_id[r],
            "logical_rollout_id": batch.row_logical_rollout_id[r],
            "parent_index": parent,
            "trace_index": int(traces[r]),
            "input_ids": [int(t) for t in ids[r, :n].tolist()],
            "token_mask": [int(m != 0) for m in mask[r, :n].tolist()],
            "generation_logprobs": logprobs[r, :n].tolist(),
            "advantages": advantages[r, :n].tolist(),
        }
        if parent >= 0:
            line["rollout_advantage"] = float(batch.logical[parent].advantage)
        line["sample_mask"] = float(samples[r])
        line["generation_policy_version"] = int(versions[r]) if int(versions[r]) >= 0 else None
        line["media_ids"] = list(batch.row_media_ids[r])
        line["pixel_digests"] = [rgb_pixel_digest(p) for p in batch.row_pixel_values[r]]
        line["routed_experts_sentinel_positions"] = [int(p) for p in batch.row_sentinel_positions[r]]
        if routes is not None:
            line["routed_experts"] = routes_json(routes[r, :n])
        lines.append(line)
    return lines


__all__ = ["batch_dump_lines"]
