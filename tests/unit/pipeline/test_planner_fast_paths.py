"""The planner's and ingest's shortcuts decide exactly as the element-wise checks they replace."""

from __future__ import annotations

import math

import numpy as np

from compactsim.harness.core.evidence import ModelCall, RolloutEvidence
from compactsim.harness.pipeline.ingest import ingest_result
from compactsim.harness.pipeline.planner import _extends, _first_positive, _starts_with_same_objects, plan_evidence
from compactsim.scenarios.payloads import Call, build_response


def _scan(lps) -> int | None:
    return next((j for j, lp in enumerate(lps) if lp > 0.0), None)


def test_first_positive_matches_the_scan_with_nan_anywhere() -> None:
    nan = math.nan
    cases = [(), (-1.0,), (0.0,), (-0.0, 0.5), (nan,), (nan, 0.25), (-1.0, nan, 2.0), (nan, -1.0), (1e-300,),
             (-3.0, -2.0, 7), (float("inf"),), (float("-inf"), 0.1), (nan, nan, -1.0, 3.0)]
    for lps in cases:
        assert _first_positive(lps) == _scan(lps), lps


def _evidence(routes: np.ndarray) -> RolloutEvidence:
    call = ModelCall(turn_id=1, prompt_token_ids=(20, 21, 22), sampled_token_ids=(23,), sampled_logprobs=(-0.5,),
                     routed_experts=routes)
    return RolloutEvidence(rollout_id="r", flavour="none", calls=(call,))


def test_partly_missing_routes_are_still_caught() -> None:
    ok = np.array([[[0, 1]], [[1, 2]], [[-1, -1]], [[0, 1]]])
    assert plan_evidence(_evidence(ok)).violations == ()
    partial = ok.copy()
    partial[1, 0, 0] = -1
    (v,) = plan_evidence(_evidence(partial)).violations
    assert v.code == "routed_experts_shape" and "row 1 layer 0 is partly -1" in v.detail
    low = ok.copy()
    low[3, 0, 1] = -2
    (v,) = plan_evidence(_evidence(low)).violations
    assert v.code == "routed_expert_id_out_of_range"


def test_ingested_prompts_equal_the_payload_whether_shared_or_not() -> None:
    first = Call([1000, 11, 12, 13], [400, 401], logprobs=[-0.5, -0.25])
    second = Call(first.prompt + first.sampled + [14, 15], [402], logprobs=[-0.125])
    rewritten = Call([1000, 99], [403], logprobs=[-0.5], boundary=True)
    fourth = Call(rewritten.prompt + rewritten.sampled + [16], [404], logprobs=[-0.5])
    payload = build_response([first, second, rewritten, fourth], rollout_id="r-share")
    evidence = ingest_result(payload).evidence
    items = [it for it in payload["output"] if "prompt_token_ids" in it]
    assert [list(c.prompt_token_ids) for c in evidence.calls] == [it["prompt_token_ids"] for it in items]
    assert all(type(t) is int for c in evidence.calls for t in c.prompt_token_ids)
    plan = plan_evidence(evidence)
    assert plan.violations == () and [t.turn_ids for t in plan.traces] == [(1, 2), (3, 4)]


def _fresh(ids) -> tuple[int, ...]:
    """Equal values held by new int objects (ids above 256 are not CPython's cached small ints)."""
    return tuple(int(str(t)) for t in ids)


def test_same_object_shortcut_accepts_only_the_very_same_objects() -> None:
    head = _fresh(range(1000, 1400))
    shared = head + _fresh((7, 1500))
    assert _starts_with_same_objects(shared, head)  # the fast path is on (CPython) and accepts a shared prefix
    assert _starts_with_same_objects(shared, ()) and _starts_with_same_objects(head, head)
    assert not _starts_with_same_objects(_fresh(shared), head)  # equal values, other objects: compare by value
    for at in (0, 1, 200, len(head) - 1):  # one object swapped for another value: never accepted
        bad = shared[:at] + (shared[at] + 1,) + shared[at + 1 :]
        assert not _starts_with_same_objects(bad, head), at
    assert not _starts_with_same_objects(head[:-1], head)  # a prefix longer than the sequence
    assert not _starts_with_same_objects(list(shared), head)  # only plain tuples are read in place


def test_extends_decides_as_the_plain_prefix_comparison() -> None:
    prev = ModelCall(turn_id=1, prompt_token_ids=_fresh(range(1000, 1300)), sampled_token_ids=_fresh((2000, 2001)),
                     sampled_logprobs=(-0.5, -0.5))
    context = prev.prompt_token_ids + prev.sampled_token_ids
    prompts = [context, context + (5,), _fresh(context) + (5,), context[:-1], ()]
    for at in (0, 150, 299, 300, 301):  # shared objects except one position (head or sampled piece)
        prompts.append(context[:at] + (context[at] + 1,) + context[at + 1 :] + (9,))
        prompts.append(context[:at] + (int(str(context[at])),) + context[at + 1 :])  # equal value, new object
    for prompt in prompts:
        assert _extends(prev, prompt) == (prompt[: len(context)] == context), prompt[:3]
