"""The planner's and ingest's shortcuts decide exactly as the element-wise checks they replace."""

from __future__ import annotations

import math

import numpy as np

from compactsim.harness.core.evidence import ModelCall, RolloutEvidence
from compactsim.harness.pipeline.ingest import ingest_result
from compactsim.harness.pipeline.planner import _first_positive, plan_evidence
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
