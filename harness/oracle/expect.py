"""The oracle's verdict for a scenario: expected plans, rows, GRPO quantities, batch metrics and errors.

Input: the `Scenario` and, for every step that ran, the agents' ground-truth logs of its
rollouts (`CollectedRollout.ground_truth`, failed rollouts included). Nothing here runs or
imports the pipeline: plans come from `compactsim.harness.oracle.plan`, rows from `compactsim.harness.oracle.rows`,
advantages from `compactsim.harness.oracle.grpo`, and the trainer's settings are read as plain data.

What the trainer receives at a step (mirrors `compactsim.scenarios.build.step_results`): the completed
rollouts in slot order, with the scenario's mutation and batch corruption applied. Errors are
reported in the order a consumer meets them: the first rollout (in that order) whose evidence is
invalid; then batch checks — duplicate logical ids, group sizes (against
`num_generations_per_prompt`), generation policy versions, and per rollout (canonical order) no
trainable token or a route layout that differs from the batch's.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from compactsim.harness.core import metrics as M
from compactsim.harness.core.errors import ConfigError
from compactsim.harness.core.expectations import (
    ExpectedError,
    ExpectedRollout,
    ExpectedRow,
    ExpectedStep,
    ExpectedTrace,
    ScenarioExpectation,
)
from compactsim.harness.core.trace_plan import physical_trace_id
from compactsim.harness.oracle.grpo import group_advantages
from compactsim.harness.oracle.plan import PlanTruth, expected_plan, routes_of
from compactsim.harness.oracle.rows import batch_route_layout, expected_rows
from compactsim.harness.oracle.truth import RolloutTruth, read_truth
from compactsim.scenarios.build import RESUBMITTED_SUFFIX
from compactsim.scenarios.build import rollout_id as slot_rollout_id
from compactsim.scenarios.build import slot_of, slots
from compactsim.scenarios.metric_expectations import parse_metric_expectations
from compactsim.scenarios.model import Scenario


@dataclass(frozen=True, slots=True)
class TrainerView:
    """The trainer settings the oracle reads, as plain values (from `Scenario.trainer_values`)."""

    num_generations_per_prompt: int | None
    leave_one_out: bool
    normalize: bool
    clip_low: float | None
    clip_high: float | None
    dp_size: int
    micro_batch_size: int
    async_mode: bool
    importance_sampling_correction: bool
    router_replay: bool = False
    max_total_sequence_length: int = 4096
    make_sequence_length_divisible_by: int = 1

    @classmethod
    def of(cls, scenario: Scenario) -> TrainerView:
        """Defaults as NeMo-RL documents them, overridden by the scenario's trainer values."""
        values = scenario.trainer_values()
        g: Mapping[str, Any] = values.get("grpo", {})
        p: Mapping[str, Any] = values.get("policy", {})
        loss: Mapping[str, Any] = values.get("loss_fn", {})
        return cls(
            num_generations_per_prompt=g.get("num_generations_per_prompt"),
            leave_one_out=bool(g.get("use_leave_one_out_baseline", True)),
            normalize=bool(g.get("normalize_rewards", True)),
            clip_low=g.get("advantage_clip_low"),
            clip_high=g.get("advantage_clip_high"),
            dp_size=int(p.get("dp_size", 1)),
            micro_batch_size=int(p.get("train_micro_batch_size", 1)),
            async_mode=bool((g.get("async_grpo") or {}).get("enabled", False)),
            importance_sampling_correction=bool(loss.get("use_importance_sampling_correction", False)),
            router_replay=bool(p.get("router_replay_enabled", False)),
            max_total_sequence_length=int(p.get("max_total_sequence_length", 4096)),
            make_sequence_length_divisible_by=int(p.get("make_sequence_length_divisible_by", 1)),
        )


def expected_reward(scenario: Scenario, truth: RolloutTruth) -> float:
    """The reward the scenario's rule gives this rollout (from the rule, not from the reward server)."""
    rw = scenario.rewards
    index = truth.rollout_index or 0
    if rw.fixed is not None:
        return float(rw.fixed)
    if rw.pattern is not None:
        return float(rw.pattern[index % len(rw.pattern)])
    if rw.by_index is not None:
        return float(rw.by_index.get(index, rw.default))
    p = rw.predicate
    assert p is not None
    hit = truth.final_answer == p.equals if p.equals is not None else (p.contains or "") in truth.final_answer
    return float(p.reward_true if hit else p.reward_false)


def _masks_sample(scenario: Scenario, truth: RolloutTruth) -> bool:
    """Whether the scenario has this rollout's verify answer set `mask_sample`: `Scenario.masks_sample` at the slot
    its spec id names, collected at that slot's step (a resubmitted copy carries its original's answer)."""
    slot = slot_of(scenario, truth.spec_rollout_id.removesuffix(RESUBMITTED_SUFFIX))
    return scenario.masks_sample(slot.group, slot.index, step=slot.step)


def _sort_key(truth: RolloutTruth) -> tuple[Any, ...]:
    """Canonical batch order: group key, then rollout index (when the trainer can see one), then id."""
    index = truth.visible_rollout_index
    return (truth.group_key, index is None, index if index is not None else 0, truth.rollout_id)


# ---------------------------------------------------------------------------------------------- the batch


@dataclass(frozen=True, slots=True, eq=False)
class _Member:
    """One result of the step's batch as the oracle models it."""

    truth: RolloutTruth
    plan: PlanTruth


def _batch_members(scenario: Scenario, step: int, truths: Mapping[str, RolloutTruth]) -> list[_Member]:
    """What the trainer receives: completed rollouts in slot order, mutation and corruption applied."""
    order = [s.rollout_id for s in slots(scenario, step)]
    batch = [truths[rid] for rid in order if truths[rid].completed]
    m, c = scenario.mutation, scenario.corruption
    mutated = slot_rollout_id(step, m.group, m.index) if m is not None and m.step == step else None
    cut = slot_rollout_id(step, c.group, c.index) if c is not None and c.step == step else None
    for what, rid in (("mutation", mutated), ("corruption", cut)):
        if rid is not None and not any(t.spec_rollout_id == rid for t in batch):
            raise ConfigError("invalid_config", f"scenario {scenario.name!r}: the {what} target {rid!r} did not complete")
    members: list[_Member] = []
    for truth in batch:
        if truth.spec_rollout_id == cut and c is not None:
            if c.kind == "drop_rollout":
                continue
            if c.kind == "zero_call_capture":
                truth = truth.with_calls(())
            elif c.kind == "bump_policy_version":
                truth = truth.with_calls([replace(call, policy_version=(call.policy_version or 0) + 1) for call in truth.calls])
            elif c.kind == "drop_reward":
                truth = replace(truth, reward_delivered=False)
            elif c.kind == "narrow_routes":  # a server with top-k one smaller recorded this rollout's routes
                truth = truth.with_calls([call if call.routes is None else replace(call, routes=call.routes[:, :, :-1])
                                          for call in truth.calls])
        plan = expected_plan(truth, mutation=m.name if truth.spec_rollout_id == mutated and m is not None else None)
        members.append(_Member(truth, plan))
        if truth.spec_rollout_id == cut and c is not None and c.kind == "duplicate_rollout":
            members.append(_Member(truth, plan))
        if truth.spec_rollout_id == cut and c is not None and c.kind == "resubmit_under_new_id":
            if not truth.has_contract:
                raise ConfigError("invalid_config", f"scenario {scenario.name!r}: resubmit_under_new_id renames the "
                                  "contract's rollout_id; flavour 'none' has none")
            again = replace(truth, spec_rollout_id=truth.spec_rollout_id + RESUBMITTED_SUFFIX)
            members.append(_Member(again, expected_plan(again)))
    return members


def _versions(truth: RolloutTruth) -> set[int | None]:
    return {c.policy_version for c in truth.calls}


def batch_error(
    truths: Sequence[RolloutTruth], view: TrainerView, plans: Mapping[str, PlanTruth] | None = None
) -> ExpectedError | None:
    """The first batch-level error of a batch (as received, duplicates included) whose every rollout planned.

    Order (docs/golden-spec.md §7, the batch checks): duplicate logical ids, group sizes, a result without a
    reward, generation versions, a rollout with nothing to train, route layouts, router replay without routes (none in
    the batch, then the first call without them in canonical order), then a row longer than
    `policy.max_total_sequence_length` (the first such rollout in batch order).
    """
    if not truths:
        return ExpectedError("no_eligible_tokens", None, None)
    counts = Counter(t.rollout_id for t in truths)
    dups = sorted(rid for rid, n in counts.items() if n > 1)
    if dups:
        return ExpectedError("duplicate_logical_rollout_id", dups[0], None)
    unique = sorted(truths, key=_sort_key)
    groups: dict[str, list[str]] = {}
    for t in unique:
        groups.setdefault(t.group_key, []).append(t.rollout_id)
    want = view.num_generations_per_prompt
    if want is not None:
        for key in sorted(groups):
            ids = sorted(groups[key])
            if len(ids) < want:
                return ExpectedError("incomplete_group", ids[0], None)
            if len(ids) > want:
                return ExpectedError("oversized_group", ids[0], None)
    for t in unique:  # whatever the group sizes: GRPO needs one reward per logical rollout
        if not t.reward_delivered:
            return ExpectedError("malformed_payload", t.rollout_id, None)
    group_versions: dict[str, set[int | None]] = {}
    for t in unique:
        v = _versions(t)
        if len(v) > 1:
            return ExpectedError("mixed_policy_versions", t.rollout_id, None)
        group_versions.setdefault(t.group_key, set()).update(v)
    for key in sorted(group_versions):
        if len(group_versions[key]) > 1:
            return ExpectedError("mixed_policy_versions", None, None)
    all_versions = set().union(*group_versions.values()) if group_versions else set()
    if len(all_versions) > 1 and (not view.async_mode or not view.importance_sampling_correction):
        return ExpectedError("mixed_policy_versions", None, None)
    layout: tuple[int, int] | None = None
    for t in unique:
        if t.num_sampled_tokens == 0:
            return ExpectedError("no_eligible_tokens", t.rollout_id, None)
        for call in t.calls:
            r = routes_of(call)
            if r is None:
                continue
            this = (int(r.shape[1]), int(r.shape[2]))
            if layout is not None and this != layout:
                return ExpectedError("inconsistent_routed_expert_shapes", t.rollout_id, None)
            layout = this
    if view.router_replay and layout is None:
        return ExpectedError("missing_routed_experts", None, None)  # the trainer refuses to train without replay
    if view.router_replay:
        # NeMo-RL's Gym path with require_routed_experts (= router replay) refuses any call whose item has
        # no routed_experts (nemo-rl-semantics §1.6), rather than backfilling it with -1 (§2.4, native path)
        for t in unique:
            for call in t.calls:
                if call.routes is None:
                    return ExpectedError("missing_routed_experts", t.rollout_id, call.turn_id)
    for t in unique:
        plan = (plans or {}).get(t.rollout_id)
        if plan is not None and any(tr.num_tokens > view.max_total_sequence_length for tr in plan.traces):
            return ExpectedError("sequence_too_long", t.rollout_id, None)
    return None


def _trace_json(plan: PlanTruth) -> tuple[ExpectedTrace, ...]:
    return tuple(
        ExpectedTrace(
            trace_id=physical_trace_id(plan.truth.rollout_id, t.index),
            trace_index=t.index,
            turn_ids=tuple(c.turn_id for c in t.calls),
            media_ids=t.last.media_ids,
            start_reason=t.start_reason,
            num_tokens=t.num_tokens,
            num_sampled_tokens=t.num_sampled_tokens,
        )
        for t in plan.traces
    )


def _padding(rows: int, view: TrainerView) -> int:
    multiple = view.dp_size * view.micro_batch_size
    return -(-rows // multiple) * multiple - rows


def exact_batch_metrics(
    rollouts: Sequence[ExpectedRollout], rows: Sequence[ExpectedRow], view: TrainerView,
    unclipped: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Every batch metric of a valid step (float sums exact up to rounding), plus one optimizer step.

    (Scheduler increments are measured by the harness from the scheduler itself: `counts.scheduler`.)

    Meanings: `compactsim.harness.core.metrics`. `advantages/sum` is NeMo-RL's sum of the unmasked, broadcast
    ``[R, S_pad]`` advantages (S_pad: the longest row rounded up to `make_sequence_length_divisible_by`),
    logged before clipping: `unclipped` maps rollout id → advantage before `advantage_clip_low/high`
    (absent: no clip); `advantages/mean|min|max` are over token_mask positions (sample_mask ignored,
    NeMo-RL §3.7), after clipping.
    """
    rows_per = Counter(r.logical_rollout_id for r in rows)
    adv = [float(r.advantage or 0.0) for r in rollouts]
    token_adv = [(float(r.advantage or 0.0), r.num_sampled_tokens) for r in rollouts if r.num_sampled_tokens > 0]
    n_tokens = sum(n for _, n in token_adv)
    masked_sum = math.fsum(a * n for a, n in token_adv)
    longest = max((len(r.input_ids) for r in rows), default=0)
    divisor = view.make_sequence_length_divisible_by
    s_pad = -(-longest // divisor) * divisor
    padding = _padding(len(rows), view)
    starts = Counter(t.start_reason for r in rollouts for t in r.traces)
    return {
        M.NUM_PHYSICAL_ROWS: len(rows),
        M.NUM_PADDING_ROWS: padding,
        M.NUM_LOGICAL_ROLLOUTS: len(rollouts),
        M.NUM_SPLIT_ROLLOUTS: sum(1 for n in rows_per.values() if n > 1),
        M.ROWS_PER_ROLLOUT_MAX: max(rows_per.values(), default=0),
        M.LOGICAL_ADVANTAGES_MEAN: math.fsum(adv) / len(adv) if adv else 0.0,
        M.LOGICAL_ADVANTAGES_SUM: math.fsum(adv),
        M.SCHEDULER_STEP_INCREMENT: len(rollouts),
        M.PR_LOGICAL_ROLLOUTS: len(rollouts),
        M.PR_PHYSICAL_TRACES: len(rows),
        M.PR_PADDING_ROWS: padding,
        M.PR_PHYSICAL_ROWS: len(rows) + padding,
        M.PR_ELIGIBLE_ACTION_TOKENS: sum(len(r.trainable_positions) for r in rows),
        M.PR_DECLARED_BOUNDARIES: starts.get("declared_boundary", 0),
        M.PR_INFERRED_DISCONTINUITIES: starts.get("inferred_discontinuity", 0),
        M.OPTIMIZER_STEPS: 1,
        M.ADVANTAGES_SUM: s_pad * math.fsum(float((unclipped or {}).get(r.logical_rollout_id, r.advantage)) for r in rows),
        M.ADVANTAGES_MEAN: masked_sum / n_tokens if n_tokens else 0.0,
        M.ADVANTAGES_MIN: min((a for a, _ in token_adv), default=0.0),
        M.ADVANTAGES_MAX: max((a for a, _ in token_adv), default=0.0),
        M.NUM_MASK_SAMPLE_FILTERED: sum(1 for r in rollouts if r.mask_sample),
        M.TOTAL_NUM_TOKENS: sum(len(r.input_ids) for r in rows),
    }


def _none_completed(step: int, truths: Sequence[RolloutTruth]) -> str | None:
    """Why a step's batch is empty, when its rollouts failed during collection (the first failure in slot order)."""
    failed = [t for t in truths if not t.completed]
    if not failed:
        return None
    first = failed[0]
    return (f"{len(failed)} of the {len(truths)} rollouts of step {step} failed during collection; the first, "
            f"{first.spec_rollout_id}, at {first.failure or 'an unlogged point'}")


def expect_step(
    scenario: Scenario,
    step: int,
    logs: Sequence[Mapping[str, Any]],
    *,
    pixel_cache: dict[str, str] | None = None,
) -> ExpectedStep:
    """Expectations for one step from its rollouts' ground-truth logs (any order, failed ones included)."""
    truths: dict[str, RolloutTruth] = {}
    for log in logs:
        t = read_truth(log)
        truths[t.spec_rollout_id] = t
    want = [s.rollout_id for s in slots(scenario, step)]
    if sorted(truths) != sorted(want):
        raise ConfigError(
            "invalid_argument",
            f"step {step} of {scenario.name!r} has rollouts {want}; the logs given are for {sorted(truths)}",
        )
    view = TrainerView.of(scenario)
    members = _batch_members(scenario, step, truths)
    plan_error = next((m.plan.error for m in members if m.plan.error is not None), None)
    plans_by_id = {m.truth.rollout_id: m.plan for m in members}
    batch_err = batch_error([m.truth for m in members], view, plans_by_id) if plan_error is None else None
    if batch_err is not None and not members:
        batch_err = replace(batch_err, cause=_none_completed(step, [truths[rid] for rid in want]))
    ok = plan_error is None and batch_err is None

    unique: dict[str, _Member] = {}
    for m in members:
        unique.setdefault(m.truth.rollout_id, m)
    ordered = sorted(unique.values(), key=lambda m: _sort_key(m.truth))
    rewards = {m.truth.rollout_id: expected_reward(scenario, m.truth) for m in ordered}
    masked = {m.truth.rollout_id: _masks_sample(scenario, m.truth) for m in ordered}
    advantages: dict[str, float | None] = dict.fromkeys(rewards)
    unclipped: dict[str, float] = {}  # NeMo-RL logs advantages/sum before clipping (semantics §3.7)
    if ok:
        groups: dict[str, list[str]] = {}
        for m in ordered:
            groups.setdefault(m.truth.group_key, []).append(m.truth.rollout_id)
        for ids in groups.values():
            adv = group_advantages([rewards[i] for i in ids], leave_one_out=view.leave_one_out, normalize=view.normalize,
                                   clip_low=view.clip_low, clip_high=view.clip_high)
            advantages.update(zip(ids, adv.advantages, strict=True))
            unclipped.update(zip(ids, adv.unclipped, strict=True))

    rollouts = tuple(
        ExpectedRollout(
            rollout_id=m.truth.rollout_id,
            group_key=m.truth.group_key,
            reward=rewards[m.truth.rollout_id],
            advantage=advantages[m.truth.rollout_id],
            mask_sample=masked[m.truth.rollout_id],
            num_sampled_tokens=m.truth.num_sampled_tokens,
            path=m.plan.path,  # type: ignore[arg-type]
            traces=_trace_json(m.plan),
            error=m.plan.error,
        )
        for m in ordered
    )
    rows: tuple[ExpectedRow, ...] = ()
    metrics: dict[str, float] = {}
    if ok:
        layout = batch_route_layout([m.plan for m in ordered])
        cache = pixel_cache if pixel_cache is not None else {}
        rows = tuple(
            row
            for m in ordered
            for row in expected_rows(m.plan, advantage=float(advantages[m.truth.rollout_id] or 0.0),
                                     mask_sample=masked[m.truth.rollout_id], route_layout=layout, pixel_digests=cache)
        )
        metrics = exact_batch_metrics(rollouts, rows, view, unclipped)
    per_step = tuple(e for e in parse_metric_expectations(scenario.metrics) if e.aggregate is None)
    return ExpectedStep(
        step=step,
        rollouts=rollouts,
        rows=rows,
        exact_metrics=metrics,
        metric_expectations=per_step if ok else (),
        batch_error=batch_err,
        error=plan_error or batch_err,
    )


def step_error(expected: ExpectedStep) -> ExpectedError | None:
    """The error the step must stop with (`ExpectedStep.error`)."""
    return expected.error


def expect_scenario(scenario: Scenario, logs_by_step: Sequence[Sequence[Mapping[str, Any]]]) -> ScenarioExpectation:
    """The whole run's expectation; stops at the first step that must fail (later logs are not read).

    `logs_by_step[k]` holds the ground-truth logs of step k's rollouts. Fewer steps than the
    scenario has are allowed (a partial run); more are a `ConfigError`.
    """
    if len(logs_by_step) > scenario.steps:
        raise ConfigError("invalid_argument", f"{len(logs_by_step)} steps of logs for scenario {scenario.name!r} (steps={scenario.steps})")
    steps: list[ExpectedStep] = []
    error: ExpectedError | None = None
    cache: dict[str, str] = {}
    for k, logs in enumerate(logs_by_step):
        expected = expect_step(scenario, k, logs, pixel_cache=cache)
        steps.append(expected)
        error = expected.error
        if error is not None:
            break
    run_level = tuple(e for e in parse_metric_expectations(scenario.metrics) if e.aggregate is not None)
    return ScenarioExpectation(
        scenario=scenario.name,
        seed=scenario.seed,
        verdict="error" if error is not None else "success",
        steps=tuple(steps),
        error=error,
        metric_expectations=run_level if error is None else (),
    )


__all__ = [
    "TrainerView",
    "batch_error",
    "exact_batch_metrics",
    "expect_scenario",
    "expect_step",
    "expected_reward",
    "step_error",
]
