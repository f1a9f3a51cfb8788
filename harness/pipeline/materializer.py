"""Materialise planned rollouts into physical training rows: one row per physical trace.

A row holds the trace's last prompt + its sampled ids; the token mask is 1 exactly on the
sampled ids of every call of the trace (a call's sampled ids sit at their own positions in the
final row, because calls within a trace are prefix continuations — re-checked here); behaviour
logprobs are stored at the token's own position; every trainable token gets its parent's logical
advantage. `parent_indices` is built first and every per-row logical field is read through it.
Padding rows are appended only after all rows are combined. Pure: plans and configs in, a
`TraceBatch` out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from compactsim.harness.core.batch import PADDING_PARENT, LogicalRecord, TraceBatch
from compactsim.harness.core.errors import ContractError
from compactsim.harness.core.evidence import ModelCall, RolloutEvidence
from compactsim.harness.core.trace_plan import PhysicalTrace, TracePlan
from compactsim.harness.pipeline.advantages import (
    LogicalAdvantages,
    check_group_sizes,
    check_unique_rollouts,
    compute_logical_advantages,
    rollout_sort_key,
)
from compactsim.harness.pipeline.media import MediaResolver
from compactsim.harness.pipeline.routes import call_routes, fill_padding_routes, fill_trace_routes, route_dtype, trace_route_layout
from compactsim.harness.pipeline.train_config import MaterializeConfig, TrainerConfig

_FLOAT_DTYPES = {"float32": torch.float32, "float64": torch.float64}
_NUMPY_FLOAT = {"float32": np.float32, "float64": np.float64}


@dataclass(frozen=True, slots=True)
class _Row:
    """One validated physical trace, ready to be written."""

    parent: int
    plan: TracePlan
    trace: PhysicalTrace
    calls: tuple[ModelCall, ...]
    routes: tuple[np.ndarray | None, ...]
    is_final_trace: bool

    @property
    def length(self) -> int:
        return self.calls[-1].num_tokens


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def prepare_trace_batch(
    plans: Sequence[TracePlan],
    evidence: Sequence[RolloutEvidence] | None,
    logical: LogicalAdvantages,
    cfg: MaterializeConfig | None = None,
) -> TraceBatch:
    """Build the training batch for one optimizer step.

    `evidence`, when given, must be the plans' own rollouts (it is cross-checked, then the plans'
    evidence is used); `logical` must hold exactly the plans' rollouts. Rows are ordered by
    `rollout_sort_key` then trace index, so they do not depend on the order plans arrive in.

    Raises `ContractError` with codes `duplicate_logical_rollout_id`, `duplicate_physical_trace_id`,
    `incomplete_group`, `oversized_group`, `empty_trace`, `no_eligible_tokens`,
    `mixed_policy_versions`, `routed_experts_shape`, `inconsistent_routed_expert_shapes`,
    `undeclared_discontinuity`, `token_logprob_length_mismatch`, `unknown_media_asset`,
    `media_decode`, or the code of a non-strict plan's first violation.
    """
    cfg = cfg or MaterializeConfig()
    ordered = _checked_plans(plans, evidence, logical, cfg)
    rows = _checked_rows(ordered)

    # ---- geometry: padding only after all real rows are combined
    num_real = len(rows)
    row_count = _round_up(num_real, cfg.dp_size * cfg.micro_batch_size)
    seq_len = _round_up(max(r.length for r in rows), cfg.make_sequence_length_divisible_by)
    fdt = _FLOAT_DTYPES[cfg.logprob_dtype]

    # parent_indices first: every other per-row logical field is derived from it
    parent_indices = torch.full((row_count,), PADDING_PARENT, dtype=torch.int64)  # (R,)
    parent_indices[:num_real] = torch.tensor([r.parent for r in rows], dtype=torch.int64)
    parents = parent_indices.tolist()
    rollout_adv = np.asarray(logical.advantages, dtype=np.float64)  # (N,) in `ordered` order
    rollout_sample = np.asarray([0.0 if m else 1.0 for m in logical.mask_sample])  # (N,)

    # The (R, S) tensors are written once each: ids and routes start uninitialised and every
    # position is set exactly once (row, then its padded tail); mask/logprobs/advantages come
    # from calloc'd numpy zeros, so the zero fill costs no separate pass over memory.
    ndt = _NUMPY_FLOAT[cfg.logprob_dtype]
    ids_np = np.empty((row_count, seq_len), dtype=np.int64)  # (R, S)
    mask_np = np.zeros((row_count, seq_len), dtype=ndt)  # (R, S)
    lp_np = np.zeros((row_count, seq_len), dtype=ndt)  # (R, S)
    adv_np = np.zeros((row_count, seq_len), dtype=ndt)  # (R, S)
    row_input_ids = torch.from_numpy(ids_np)
    row_token_mask = torch.from_numpy(mask_np)
    row_generation_logprobs = torch.from_numpy(lp_np)
    row_advantages = torch.from_numpy(adv_np)
    row_input_lengths = torch.zeros((row_count,), dtype=torch.int32)  # (R,)
    row_trace_index = torch.full((row_count,), -1, dtype=torch.int64)  # (R,)
    row_version = torch.full((row_count,), -1, dtype=torch.int64)  # (R,)
    ids_np[num_real:] = cfg.pad_token_id

    routed = [a for r in rows for a in r.routes if a is not None]
    routed_experts: torch.Tensor | None = None
    routes_np: np.ndarray | None = None
    pad_routes: np.ndarray | None = None
    if routed:
        layers, topk = int(routed[0].shape[1]), int(routed[0].shape[2])
        routed_experts = torch.empty((row_count, seq_len, layers, topk), dtype=route_dtype(routed))  # (R, S, L, K)
        routes_np = routed_experts.numpy()
        # one placeholder row (S, L, K), then plain contiguous copies of its tail: broadcasting
        # `arange(K)` over the whole (R, S, L, K) tensor walks it K entries at a time
        pad_routes = np.empty((seq_len, layers, topk), dtype=routes_np.dtype)
        fill_padding_routes(pad_routes)
        routes_np[num_real:] = pad_routes

    media = MediaResolver()
    mask_spans: list[tuple[tuple[int, int], ...]] = []
    media_ids: list[tuple[str, ...]] = []
    pixels: list[tuple[torch.Tensor, ...]] = []
    sentinels: list[tuple[int, ...]] = []
    lengths: list[int] = []
    for r, row in enumerate(rows):
        parent = parents[r]
        last = row.calls[-1]
        p_last = len(last.prompt_token_ids)
        length = row.length
        ids_np[r, :p_last] = last.prompt_token_ids
        ids_np[r, p_last:length] = last.sampled_token_ids
        ids_np[r, length:] = cfg.pad_token_id
        spans: list[tuple[int, int]] = []
        for call in row.calls:
            start = len(call.prompt_token_ids)
            end = start + len(call.sampled_token_ids)
            # a non-last call ends inside the last prompt (`_check_prefix_positions`), so its
            # sampled ids are compared with the last prompt's own slice, not read back from numpy
            if call is not last and last.prompt_token_ids[start:end] != call.sampled_token_ids:
                raise ContractError(
                    "undeclared_discontinuity",
                    rollout_id=row.plan.evidence.rollout_id,
                    turn_id=call.turn_id,
                    detail=f"physical trace {row.trace.trace_id!r}: turn {call.turn_id}'s sampled ids are not at "
                    f"positions [{start}, {end}) of the trace's final row (turn {last.turn_id}'s prompt), so the "
                    "calls are not prefix continuations",
                )
            if end > start:
                mask_np[r, start:end] = 1.0
                lp_np[r, start:end] = call.sampled_logprobs
                adv_np[r, start:end] = rollout_adv[parent]
                spans.append((start, end))
        if not np.isfinite(lp_np[r, :length]).all():
            raise ContractError(
                "malformed_payload",
                rollout_id=row.plan.evidence.rollout_id,
                detail=f"physical trace {row.trace.trace_id!r}: generation logprobs contain NaN or inf",
            )
        sentinel: tuple[int, ...] = ()
        if routes_np is not None and pad_routes is not None:
            sentinel = fill_trace_routes(routes_np[r], row.calls, row.routes, is_final_trace=row.is_final_trace)
            routes_np[r, length:] = pad_routes[length:]
        evidence_r = row.plan.evidence
        ids = last.media_ids
        media_ids.append(ids)
        pixels.append(media.resolve(evidence_r, ids, turn_id=last.turn_id))
        mask_spans.append(tuple(spans))
        sentinels.append(sentinel)
        lengths.append(length)
        row_trace_index[r] = row.trace.trace_index
        version = last.policy_version
        row_version[r] = -1 if version is None else version
    row_input_lengths[:num_real] = torch.tensor(lengths, dtype=torch.int32)
    row_sample_mask = torch.zeros((row_count,), dtype=fdt)  # (R,)
    row_sample_mask[:num_real] = torch.as_tensor(rollout_sample[np.asarray(parents[:num_real])], dtype=fdt)

    pad = row_count - num_real
    return TraceBatch(
        row_input_ids=row_input_ids,
        row_input_lengths=row_input_lengths,
        row_token_mask=row_token_mask,
        row_generation_logprobs=row_generation_logprobs,
        row_advantages=row_advantages,
        row_sample_mask=row_sample_mask,
        parent_indices=parent_indices,
        row_trace_index=row_trace_index,
        row_generation_policy_version=row_version,
        routed_experts=routed_experts,
        row_logical_rollout_id=tuple(ordered[p].evidence.rollout_id for p in parents[:num_real]) + (None,) * pad,
        row_physical_trace_id=tuple(row.trace.trace_id for row in rows) + (None,) * pad,
        row_mask_spans=tuple(mask_spans) + ((),) * pad,
        row_media_ids=tuple(media_ids) + ((),) * pad,
        row_pixel_values=tuple(pixels) + ((),) * pad,
        row_sentinel_positions=tuple(sentinels) + ((),) * pad,
        logical=_logical_records(ordered, logical, parents, mask_spans, sentinels, routes_np),
        dp_size=cfg.dp_size,
        micro_batch_size=cfg.micro_batch_size,
    )


def materialize(plans: Sequence[TracePlan], cfg: TrainerConfig) -> TraceBatch:
    """Logical advantages then rows, with both configs derived from one `TrainerConfig`."""
    logical = compute_logical_advantages([p.evidence for p in plans], cfg.advantage_config())
    return prepare_trace_batch(plans, None, logical, cfg.materialize_config())


# ---------------------------------------------------------------------------------------------
# validation (structural checks run before any tensor is allocated; token positions and media
# are checked while rows are written)


def _checked_plans(
    plans: Sequence[TracePlan],
    evidence: Sequence[RolloutEvidence] | None,
    logical: LogicalAdvantages,
    cfg: MaterializeConfig,
) -> list[TracePlan]:
    if not plans:
        raise ContractError("no_eligible_tokens", detail="the batch has no rollouts")
    for plan in plans:
        if not plan.trainable:
            v = plan.violations[0]
            raise ContractError(
                v.code,  # type: ignore[arg-type]
                rollout_id=plan.evidence.rollout_id,
                turn_id=v.turn_id,
                detail=f"a plan with violations is not trainable ({len(plan.violations)} violation(s)); first: {v.detail}",
            )
    check_unique_rollouts(p.evidence for p in plans)
    if evidence is not None:
        given = sorted(e.rollout_id for e in evidence)
        planned = sorted(p.evidence.rollout_id for p in plans)
        if given != planned:
            raise ValueError(f"evidence rollouts {given[:5]} differ from the plans' rollouts {planned[:5]}")
    ordered = sorted(plans, key=lambda p: rollout_sort_key(p.evidence))
    if sorted(logical.rollout_ids) != sorted(p.evidence.rollout_id for p in ordered):
        raise ValueError("logical advantages must cover exactly the planned rollouts (compute them on the same batch)")
    if list(logical.rollout_ids) != [p.evidence.rollout_id for p in ordered]:
        raise ValueError("logical advantages are not in canonical rollout order (use compute_logical_advantages)")
    check_group_sizes((p.evidence for p in ordered), cfg.num_generations_per_prompt)
    _check_policy_versions(ordered, cfg)
    return ordered


def _check_policy_versions(ordered: Sequence[TracePlan], cfg: MaterializeConfig) -> None:
    """Sync: one version per batch. Async: one per group; several groups' versions only with IS correction."""
    group_versions: dict[str, set[int | None]] = {}
    for plan in ordered:
        ev = plan.evidence
        versions = {c.policy_version for c in ev.calls}
        if len(versions) > 1:
            raise ContractError(
                "mixed_policy_versions",
                rollout_id=ev.rollout_id,
                detail=f"the calls of one rollout were generated by policy versions {_show(versions)}",
            )
        group_versions.setdefault(ev.group_key, set()).update(versions)
    for key in sorted(group_versions):
        if len(group_versions[key]) > 1:
            raise ContractError(
                "mixed_policy_versions",
                detail=f"group {key!r} mixes generation policy versions {_show(group_versions[key])}; a group "
                "shares one baseline and must come from one version (sync and async alike)",
            )
    batch_versions = set().union(*group_versions.values())
    if len(batch_versions) <= 1:
        return
    if not cfg.async_mode:
        raise ContractError(
            "mixed_policy_versions",
            detail=f"one sync optimizer batch mixes generation policy versions {_show(batch_versions)}; sync GRPO "
            "trains on one version per batch",
        )
    if not cfg.use_importance_sampling_correction:
        raise ContractError(
            "mixed_policy_versions",
            detail=f"async batch mixes generation policy versions {_show(batch_versions)} across groups without "
            "importance-sampling correction (loss_fn.use_importance_sampling_correction)",
        )


def _show(versions: set[int | None]) -> list[int | None]:
    return sorted(versions, key=lambda v: (v is None, v if v is not None else 0))


def _checked_rows(ordered: Sequence[TracePlan]) -> list[_Row]:
    rows: list[_Row] = []
    seen_traces: set[str] = set()
    layout: tuple[int, int] | None = None
    layout_owner = ""
    for parent, plan in enumerate(ordered):
        ev = plan.evidence
        if ev.num_sampled_tokens == 0:
            raise ContractError(
                "no_eligible_tokens",
                rollout_id=ev.rollout_id,
                detail=f"the rollout has {len(ev.calls)} model call(s) and no sampled token to train on",
            )
        covered = [i for t in plan.traces for i in t.call_indices]
        for k, trace in enumerate(plan.traces):
            if trace.trace_id in seen_traces:
                raise ContractError(
                    "duplicate_physical_trace_id",
                    rollout_id=ev.rollout_id,
                    detail=f"physical trace id {trace.trace_id!r} occurs more than once in the batch",
                )
            seen_traces.add(trace.trace_id)
            if not trace.call_indices:
                raise ContractError(
                    "empty_trace",
                    rollout_id=ev.rollout_id,
                    detail=f"physical trace {trace.trace_id!r} (index {trace.trace_index}) has no model call",
                )
            calls = tuple(ev.calls[i] for i in trace.call_indices)
            _check_prefix_positions(ev.rollout_id, trace, calls)
            routes = tuple(call_routes(c, rollout_id=ev.rollout_id) for c in calls)
            this = trace_route_layout(calls, routes, rollout_id=ev.rollout_id)
            if this is not None:
                if layout is not None and this != layout:
                    raise ContractError(
                        "inconsistent_routed_expert_shapes",
                        rollout_id=ev.rollout_id,
                        detail=f"physical trace {trace.trace_id!r} has routes [layers, topk]={list(this)}, but "
                        f"{layout_owner!r} has {list(layout)}; one batch needs one route layout",
                    )
                if layout is None:  # the first routed trace sets the batch's layout; findings name it
                    layout, layout_owner = this, trace.trace_id
            rows.append(_Row(parent, plan, trace, calls, routes, is_final_trace=k == len(plan.traces) - 1))
        if covered != list(range(len(ev.calls))):
            raise ValueError(
                f"plan of {ev.rollout_id!r} covers call indices {covered}; expected each of 0..{len(ev.calls) - 1} once, in order"
            )
    return rows


def _check_prefix_positions(rollout_id: str, trace: PhysicalTrace, calls: Sequence[ModelCall]) -> None:
    """Each call must start at or after the previous call's end, and token/logprob counts agree."""
    prev_end = 0
    for call in calls:
        if len(call.sampled_token_ids) != len(call.sampled_logprobs):
            raise ContractError(
                "token_logprob_length_mismatch",
                rollout_id=rollout_id,
                turn_id=call.turn_id,
                detail=f"generation_token_ids has {len(call.sampled_token_ids)} ids, generation_log_probs has "
                f"{len(call.sampled_logprobs)}",
            )
        if len(call.prompt_token_ids) < prev_end:
            raise ContractError(
                "undeclared_discontinuity",
                rollout_id=rollout_id,
                turn_id=call.turn_id,
                detail=f"physical trace {trace.trace_id!r}: turn {call.turn_id}'s prompt has "
                f"{len(call.prompt_token_ids)} tokens, shorter than the previous call's prompt + sampled "
                f"({prev_end}), so it cannot continue it",
            )
        prev_end = call.num_tokens


def _logical_records(
    ordered: Sequence[TracePlan],
    logical: LogicalAdvantages,
    parents: list[int],
    mask_spans: Sequence[tuple[tuple[int, int], ...]],
    sentinels: Sequence[tuple[int, ...]],
    routes_np: np.ndarray | None,
) -> tuple[LogicalRecord, ...]:
    by_parent: dict[int, list[int]] = {}
    for r, p in enumerate(parents):
        if p != PADDING_PARENT:
            by_parent.setdefault(p, []).append(r)
    records: list[LogicalRecord] = []
    for i, plan in enumerate(ordered):
        ev = plan.evidence
        row_ids = tuple(by_parent[i])
        sampled_routes: np.ndarray | None = None
        logical_sentinels: list[int] = []
        if routes_np is not None:
            pieces: list[np.ndarray] = []
            offset = 0
            for r in row_ids:
                for start, end in mask_spans[r]:
                    pieces.append(routes_np[r, start:end].copy())  # an independent logical copy
                    offset += end - start
                if sentinels[r] and mask_spans[r] and mask_spans[r][-1][1] - 1 == sentinels[r][0]:
                    logical_sentinels.append(offset - 1)
            sampled_routes = np.concatenate(pieces, axis=0)
        versions = {c.policy_version for c in ev.calls}
        records.append(
            LogicalRecord(
                index=i,
                rollout_id=ev.rollout_id,
                group_key=ev.group_key,
                reward=logical.rewards[i],
                baseline=logical.baselines[i],
                std=logical.stds[i],
                advantage=logical.advantages[i],
                mask_sample=logical.mask_sample[i],
                num_sampled_tokens=ev.num_sampled_tokens,
                row_indices=row_ids,
                generation_policy_version=next(iter(versions)) if versions else None,
                sampled_routes=sampled_routes,
                route_sentinel_positions=tuple(logical_sentinels),
                trace_start_reasons=tuple(t.start_reason for t in plan.traces),
                route_less_turns=tuple(c.turn_id for c in ev.calls if c.routed_experts is None),
                unclipped_advantage=logical.unclipped(i),
            )
        )
    return tuple(records)


__all__ = ["materialize", "prepare_trace_batch"]
