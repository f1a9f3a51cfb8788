"""Rollouts from the mock policy server, trainer configs, and deliberately reshaped batches for trainer tests.

`collect_rollouts` runs real policy-mode rollouts of a reference recipe in-process (no port);
`permute_rows` reorders a batch's real rows (a valid batch, same training semantics);
`flatten_rollouts` is a deliberately WRONG materialization: every compacted rollout's rows are
concatenated into one sequence, as a consumer that ignored boundaries would train it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.train_run import TrainRunConfig, collect_groups, open_servers, resolve_recipe, trainer_config


def run_config(scenario: str = "pr-validation-image-compaction-k2", **settings: Any) -> TrainRunConfig:
    """A `TrainRunConfig` for a reference recipe (float64, in-process, nothing saved by default)."""
    return TrainRunConfig.model_validate(
        {"scenario": scenario, "recipe": resolve_recipe(scenario), "save_rollouts": False, **settings}
    )


def collect_rollouts(scenario: str = "pr-validation-image-compaction-k2", *, seed: int = 0,
                     groups: Sequence[int] = (0, 1), dtype: str = "float64") -> list[Any]:
    """Collected rollouts (results + ground truth) of prompt groups `groups`, generated at policy version 0."""
    run = run_config(scenario, seed=seed, dtype=dtype)
    with open_servers(run, trainer_config(run), max(groups) + 1) as clients:
        return collect_groups(clients, run, groups, generation_version=0)  # fresh servers: the start version


def make_cfg(*, dtype: str = "float64", overrides: Mapping[str, Any] | None = None, **settings: Any) -> TrainerConfig:
    """The trainer config of a reference run, with nested `overrides` (e.g. {"policy": {"dp_size": 2}})."""
    return trainer_config(run_config(dtype=dtype, trainer_overrides=dict(overrides or {}), **settings))


def _pick(batch: TraceBatch, order: Sequence[int]) -> dict[str, Any]:
    idx = torch.as_tensor(list(order), dtype=torch.long)
    fields: dict[str, Any] = {}
    for name in ("row_input_ids", "row_input_lengths", "row_token_mask", "row_generation_logprobs", "row_advantages",
                 "row_sample_mask", "parent_indices", "row_trace_index", "row_generation_policy_version"):
        fields[name] = getattr(batch, name)[idx]
    fields["routed_experts"] = None if batch.routed_experts is None else batch.routed_experts[idx]
    for name in ("row_logical_rollout_id", "row_physical_trace_id", "row_mask_spans", "row_media_ids",
                 "row_pixel_values", "row_sentinel_positions"):
        fields[name] = tuple(getattr(batch, name)[i] for i in order)
    return fields


def _with_row_indices(batch: TraceBatch, fields: Mapping[str, Any]) -> TraceBatch:
    parents = fields["parent_indices"].tolist()
    logical = tuple(
        replace(rec, row_indices=tuple(r for r, p in enumerate(parents) if p == rec.index)) for rec in batch.logical
    )
    return replace(batch, **fields, logical=logical)


def permute_rows(batch: TraceBatch, perm: Sequence[int]) -> TraceBatch:
    """The batch with its real rows in order `perm` (a permutation of 0..num_real_rows-1); padding stays last."""
    real = batch.num_real_rows
    assert sorted(perm) == list(range(real)), "perm must permute the real rows"
    return _with_row_indices(batch, _pick(batch, list(perm) + list(range(real, batch.num_rows))))


def flatten_rollouts(batch: TraceBatch) -> TraceBatch:
    """WRONG on purpose: each logical rollout becomes ONE row, its physical rows concatenated in trace order.

    Token ids, masks, behaviour logprobs, advantages, routes and images are all carried over
    faithfully; only the context is wrong: a later trace's tokens now follow the earlier trace's
    tokens instead of their own (compacted) prompt. dp_size and micro_batch_size become 1.
    """
    n = batch.num_logical
    lengths = [sum(int(batch.row_input_lengths[r]) for r in rec.row_indices) for rec in batch.logical]
    width = max(lengths)
    ids = torch.zeros((n, width), dtype=batch.row_input_ids.dtype)
    mask = torch.zeros((n, width), dtype=batch.row_token_mask.dtype)
    gen = torch.zeros((n, width), dtype=batch.row_generation_logprobs.dtype)
    adv = torch.zeros((n, width), dtype=batch.row_advantages.dtype)
    routes = None
    if batch.routed_experts is not None:
        k = batch.routed_experts.shape[-1]
        routes = torch.arange(k, dtype=batch.routed_experts.dtype).expand(n, width, *batch.routed_experts.shape[2:]).clone()
    spans, media, pixels, sentinels = [], [], [], []
    for i, rec in enumerate(batch.logical):
        at = 0
        row_spans: list[tuple[int, int]] = []
        row_media: list[str] = []
        row_pixels: list[torch.Tensor] = []
        for r in rec.row_indices:
            length = int(batch.row_input_lengths[r])
            ids[i, at:at + length] = batch.row_input_ids[r, :length]
            mask[i, at:at + length] = batch.row_token_mask[r, :length]
            gen[i, at:at + length] = batch.row_generation_logprobs[r, :length]
            adv[i, at:at + length] = batch.row_advantages[r, :length]
            if routes is not None:
                routes[i, at:at + length] = batch.routed_experts[r, :length]
            row_spans += [(a + at, b + at) for a, b in batch.row_mask_spans[r]]
            row_media += batch.row_media_ids[r]
            row_pixels += batch.row_pixel_values[r]
            at += length
        spans.append(tuple(row_spans))
        media.append(tuple(row_media))
        pixels.append(tuple(row_pixels))
        sentinels.append(())
    real_rows = [rec.row_indices[0] for rec in batch.logical]
    logical = tuple(replace(rec, row_indices=(i,)) for i, rec in enumerate(batch.logical))
    return replace(
        batch,
        row_input_ids=ids,
        row_input_lengths=torch.tensor(lengths, dtype=batch.row_input_lengths.dtype),
        row_token_mask=mask,
        row_generation_logprobs=gen,
        row_advantages=adv,
        row_sample_mask=batch.row_sample_mask[real_rows],
        parent_indices=torch.arange(n, dtype=torch.int64),
        row_trace_index=torch.zeros(n, dtype=torch.int64),
        row_generation_policy_version=batch.row_generation_policy_version[real_rows],
        routed_experts=routes,
        row_logical_rollout_id=tuple(rec.rollout_id for rec in batch.logical),
        row_physical_trace_id=tuple(f"{rec.rollout_id}/flattened" for rec in batch.logical),
        row_mask_spans=tuple(spans),
        row_media_ids=tuple(media),
        row_pixel_values=tuple(pixels),
        row_sentinel_positions=tuple(sentinels),
        logical=logical,
        dp_size=1,
        micro_batch_size=1,
    )


__all__ = ["collect_rollouts", "flatten_rollouts", "make_cfg", "permute_rows", "run_config"]
