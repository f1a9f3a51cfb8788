"""Planner properties over random rollouts built from a known segmentation."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from compactsim.harness.core.errors import ContractError
from compactsim.harness.pipeline.planner import plan_rollout
from compactsim.scenarios.mutations import MUTATIONS, MutationNotApplicable
from compactsim.scenarios.payloads import Call, build_response

MEDIA_POOL = ["screen-a", "screen-b", "screen-c", "chart-1"]
FLAVOURS = ["transport", "full", "pr2870", "osworld"]


@st.composite
def segmented_rollouts(draw: st.DrawFn, *, min_calls: int = 1, max_calls: int = 12) -> tuple[list[Call], list[list[int]]]:
    """Calls built from a ground-truth segmentation: (calls, [[turn ids of each trace]])."""
    n = draw(st.integers(min_calls, max_calls))
    starts = [0] + sorted(draw(st.sets(st.integers(1, n - 1), max_size=n - 1))) if n > 1 else [0]
    tokens = st.lists(st.integers(10, 60), min_size=0, max_size=6)
    calls: list[Call] = []
    for i in range(n):
        sampled = draw(st.lists(st.integers(10, 60), min_size=1, max_size=4))
        media_new = draw(st.lists(st.sampled_from(MEDIA_POOL), max_size=2))
        if i in starts:
            media = draw(st.lists(st.sampled_from(MEDIA_POOL), max_size=3)) if i else media_new
            # A rewritten prompt: starts with a marker the previous context cannot start with.
            prompt = [1000 + i] + draw(tokens)
            calls.append(Call(prompt, sampled, media=media, boundary=i > 0))
        else:
            prev = calls[-1]
            prompt = prev.prompt + prev.sampled + draw(tokens)
            calls.append(Call(prompt, sampled, media=prev.media + media_new))
    bounds = starts + [n]
    segmentation = [list(range(bounds[k] + 1, bounds[k + 1] + 1)) for k in range(len(starts))]
    return calls, segmentation


@given(segmented_rollouts(), st.sampled_from(FLAVOURS))
def test_plan_traces_equal_the_ground_truth_segmentation(rollout, flavour):
    calls, segmentation = rollout
    plan = plan_rollout(build_response(calls, flavour=flavour))
    assert [list(t.turn_ids) for t in plan.traces] == segmentation
    assert [list(t.media_ids) for t in plan.traces] == [calls[seg[-1] - 1].media for seg in segmentation]
    assert plan.path == ("physical" if len(segmentation) > 1 else "single")
    total_sampled = sum(len(c.sampled) for c in calls)
    assert sum(t.num_sampled_tokens for t in plan.traces) == total_sampled
    for t, seg in zip(plan.traces, segmentation, strict=True):
        last = calls[seg[-1] - 1]
        assert t.num_tokens == len(last.prompt) + len(last.sampled)


@given(segmented_rollouts(min_calls=2), st.sampled_from(MUTATIONS), st.sampled_from(["transport", "full", "pr2870"]))
def test_every_applicable_mutation_gives_its_documented_code(rollout, mutation, flavour):
    calls, _ = rollout
    base = build_response(calls, flavour=flavour)
    try:
        bad = mutation.apply(base)
    except MutationNotApplicable:
        return
    if mutation.stage == "materialize":  # the planner reads no pixels: the rows' materializer refuses it
        plan_rollout(bad)
        return
    try:
        plan_rollout(bad)
    except ContractError as exc:
        assert exc.code == mutation.code, (mutation.name, str(exc))
    else:
        raise AssertionError(f"{mutation.name} was accepted")


_JSON_LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 2**40), st.floats(allow_nan=True), st.text(max_size=5)
)
_JSON = st.recursive(
    _JSON_LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, prefix + (i,))
    return out


@settings(max_examples=300)
@given(st.data(), st.sampled_from(["transport", "full", "pr2870", "osworld", "none"]))
def test_random_json_mutations_only_ever_raise_contract_error(data, flavour):
    c1 = Call([1, 2], [3], media=["m"], routes=[[[0, 1]]] * 3)
    c2 = Call([7], [8, 9], media=["m"], boundary=True)
    payload = copy.deepcopy(build_response([c1, c2], flavour=flavour))
    for _ in range(data.draw(st.integers(1, 3))):
        paths = _paths(payload)
        path = data.draw(st.sampled_from(paths))
        action = data.draw(st.sampled_from(["replace", "delete"]))
        if not path:
            payload = data.draw(_JSON)
            continue
        parent = payload
        for key in path[:-1]:
            parent = parent[key]
        if action == "delete":
            del parent[path[-1]]
        else:
            parent[path[-1]] = data.draw(_JSON)
    json.dumps(payload)  # still JSON
    for strict in (True, False):
        try:
            plan_rollout(payload, strict=strict)
        except ContractError:
            assert strict, "non-strict planning must never raise"
