"""Helpers for broken backends that bend one piece of the reference trainer for the length of one call."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any
from unittest.mock import patch

import numpy as np

from compactsim.harness.pipeline import trainer as trainer_module
from compactsim.harness.pipeline.advantages import clip_advantages, compute_logical_advantages, grpo_advantages
from compactsim.harness.pipeline.loss import LossOutput
from compactsim.harness.pipeline.materializer import prepare_trace_batch


@contextmanager
def loss_replaced(wrap: Callable[[Callable[..., LossOutput]], Callable[..., LossOutput]]) -> Iterator[None]:
    """Run the reference trainer with `clipped_pg_loss` replaced by `wrap(original)`; restored afterwards."""
    with patch.object(trainer_module, "clipped_pg_loss", wrap(trainer_module.clipped_pg_loss)):
        yield


def loss_variant(*edits: tuple[str, str]) -> Callable[..., LossOutput]:
    """The reference `clipped_pg_loss` rebuilt from its own source with each (old, new) text edit made: for a bug
    inside the loss body, which no wrapper around the function can make. Each `old` must occur exactly once, so an
    edit of the reference that moves the text fails here instead of building a loss without the bug."""
    import __future__
    import inspect

    from compactsim.harness.pipeline import loss as loss_module

    source = inspect.getsource(loss_module.clipped_pg_loss)
    for old, new in edits:
        if source.count(old) != 1:
            raise AssertionError(f"loss_variant: {old!r} occurs {source.count(old)} times in clipped_pg_loss")
        source = source.replace(old, new)
    namespace = dict(vars(loss_module))
    # annotations stay strings, as in the module (`torch` is imported inside the function, not at module level)
    code = compile(source, "<clipped_pg_loss variant>", "exec", flags=__future__.annotations.compiler_flag, dont_inherit=True)
    exec(code, namespace)  # noqa: S102 - test-only sabotage
    return namespace["clipped_pg_loss"]


@contextmanager
def step_with_group_changes(optimizer: Any, change: Callable[[dict[str, Any]], dict[str, Any]]) -> Iterator[None]:
    """Run the block with each `optimizer.step()` first setting, in every param group, the values `change(group)`
    returns (it may also touch the group's gradients), and putting the group's own values back after the step."""
    original = optimizer.step

    def changed_step(closure: Any = None) -> Any:
        saved = []
        for group in optimizer.param_groups:
            values = change(group)
            saved.append({key: group[key] for key in values})
            group.update(values)
        try:
            return original(closure)
        finally:
            for group, values in zip(optimizer.param_groups, saved, strict=True):
                group.update(values)

    with patch.object(optimizer, "step", changed_step):
        yield


def local_counts(kwargs: dict[str, Any]) -> tuple[float, float]:
    """(trained tokens, sequences) of the micro-batch a loss call sees."""
    from compactsim.harness.pipeline.loss import valid_counts

    n = valid_counts(kwargs["token_mask"], kwargs["sample_mask"])
    return n.tokens, n.seqs


def with_metrics(result: Any, updates: dict[str, float]) -> Any:
    """`result` (a `StepResult`) reporting `updates` over its metrics, in the result and its artifact alike."""
    from dataclasses import replace

    metrics = {**result.metrics, **updates}
    return replace(result, metrics=metrics, artifact=replace(result.artifact, metrics=metrics))


def next_token_frame(kwargs: dict[str, Any]) -> tuple[Any, Any, Any]:
    """(curr, prev, m) of a loss call in the next-token frame ``[B, S-1]``: m = token_mask[:, 1:]·sample_mask."""
    import torch

    token_mask = kwargs["token_mask"]
    S = token_mask.shape[1]
    curr = kwargs["curr_logprobs"].detach().to(torch.float64)
    curr = curr[:, 1:] if curr.shape[1] == S else curr
    prev = kwargs["prev_logprobs"][:, 1:].to(torch.float64)
    mask = token_mask[:, 1:].to(torch.float64) * kwargs["sample_mask"].to(torch.float64)[:, None]
    return curr, prev, mask


def materialized_with_advantage_settings(plans: Any, cfg: Any, **settings: Any) -> Any:
    """The reference's batch with every rollout's advantage computed under `cfg`'s advantage settings changed by
    `settings` (e.g. ``use_leave_one_out_baseline=True``); rows, order and every check are the reference's."""
    acfg = cfg.advantage_config().model_copy(update=settings)
    logical = compute_logical_advantages([p.evidence for p in plans], acfg)
    return prepare_trace_batch(plans, None, logical, cfg.materialize_config())


def materialized_with_groups_by(plans: Any, cfg: Any, key: Callable[[Any], str]) -> Any:
    """The reference's batch with GRPO groups formed by `key(evidence)` instead of the contract's group key.

    Order, identity and group-size checks and rewards are the reference's (so the batch is accepted);
    only the baseline, std and advantage of each rollout come from the regrouped rewards.
    """
    acfg = cfg.advantage_config()
    ref = compute_logical_advantages([p.evidence for p in plans], acfg)
    by_id = {p.evidence.rollout_id: p.evidence for p in plans}
    groups: dict[str, list[int]] = {}
    for k, rid in enumerate(ref.rollout_ids):
        groups.setdefault(key(by_id[rid]), []).append(k)
    raw, base, std = (np.zeros(len(ref.rollout_ids)) for _ in range(3))
    for idx in groups.values():
        raw[idx], base[idx], std[idx] = grpo_advantages(
            [ref.rewards[k] for k in idx], leave_one_out=acfg.use_leave_one_out_baseline, normalize=acfg.normalize_rewards)
    adv = clip_advantages(raw, acfg.advantage_clip_low, acfg.advantage_clip_high)
    # every per-rollout field regrouped, the unclipped advantages (advantages/sum) included
    logical = replace(ref, baselines=tuple(map(float, base)), stds=tuple(map(float, std)),
                      advantages=tuple(map(float, adv)), unclipped_advantages=tuple(map(float, raw)))
    return prepare_trace_batch(plans, None, logical, cfg.materialize_config())


@contextmanager
def route_envelope_read_as(transform: Callable[[np.ndarray], np.ndarray]) -> Iterator[None]:
    """The planner's `nrlre1` route-envelope decoder, its decoded [S, L, K] array passed through `transform`."""
    from compactsim.harness.pipeline import ingest

    original = ingest._decode_route_envelope

    def decode(text: str, turn_id: int, violations: list) -> np.ndarray | None:
        routes = original(text, turn_id, violations)
        return None if routes is None else transform(routes)

    with patch.object(ingest, "_decode_route_envelope", decode):
        yield

