"""The oracle's expected rows for five tiny scenarios, written out by hand (never recomputed here).

Token ids: specials 0..31 (BOS=1 TURN_START=3 TURN_END=4 USER=6 ASSISTANT=7 TOOL=8 <think>=9
</think>=10 <tool_call>=11 <tool_args>=12 </tool_call>=13 <tool_response>=14 </tool_response>=15
<image>=16), byte b is 32+b ('H'=104 'i'=137 'a'=129 'b'=130 'f'=134 'g'=135 'o'=143 'k'=139
'p'=144 'q'=145 'r'=146 's'=147 't'=148 'x'=152 '{'=155 '}'=157). Each test also checks the
pipeline's rows agree, so the literal values pin both sides.
"""

from __future__ import annotations

import pytest

from compactsim.harness.core import metrics as M
from compactsim.scenarios.model import Scenario
from tests.unit.scenarios.scenario_helpers import row_differences, run_step

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")

#: <bos> <turn_start> <user> 'Hi' <turn_end> <turn_start> <assistant>
HEAD = [1, 3, 6, 104, 137, 4, 3, 7]
#: <tool_call> 'f' <tool_args> '{}' </tool_call> <turn_end>
CALL_F = [11, 134, 12, 155, 157, 13, 4]
CALL_G = [11, 135, 12, 155, 157, 13, 4]
#: <turn_start> <tool> <tool_response> 'r' </tool_response> <turn_end>
TOOL_R = [3, 8, 14, 146, 15, 4]
TOOL_S = [3, 8, 14, 147, 15, 4]
#: <turn_start> <user> 4 x <image> <turn_end>
IMAGE_MSG = [3, 6, 16, 16, 16, 16, 4]


def _outcome(data: dict):
    outcome = run_step(Scenario.model_validate({"name": "hand", "purpose": "hand-checked", **data}))
    assert outcome.error is None and outcome.expected.error is None
    assert row_differences(outcome.expected.rows, outcome.batch) == []
    return outcome


def test_two_append_calls_make_one_row_with_two_spans_and_opposite_advantages():
    out = _outcome({"script": {"task": "Hi", "turns": [
        {"text": "a", "tool_calls": [{"name": "f"}], "tool_results": [{"output": "r"}],
         "logprobs": [-0.5, -0.25, -1.0, -0.125, -0.75, -2.0, -0.0625, -0.375]},
        {"text": "b", "logprobs": [-0.5, -1.5]},
    ]}})
    ids = HEAD + [129] + CALL_F + TOOL_R + [3, 7] + [130, 4]
    assert ids == [1, 3, 6, 104, 137, 4, 3, 7, 129, 11, 134, 12, 155, 157, 13, 4, 3, 8, 14, 146, 15, 4, 3, 7, 130, 4]
    rows = {r.physical_trace_id: r for r in out.expected.rows}
    assert sorted(rows) == ["s0-g0-r0/trace-0", "s0-g0-r1/trace-0"]
    for rid, advantage in (("s0-g0-r0/trace-0", 1.0), ("s0-g0-r1/trace-0", -1.0)):  # n=2, leave-one-out: std 0
        row = rows[rid]
        assert list(row.input_ids) == ids
        assert row.mask_spans == ((8, 16), (24, 26))
        assert row.generation_logprobs == (-0.5, -0.25, -1.0, -0.125, -0.75, -2.0, -0.0625, -0.375, -0.5, -1.5)
        assert row.advantage == advantage
        assert row.sample_mask == 1.0
        assert row.media_ids == () and row.pixel_digests == ()
        assert row.sentinel_positions == ()
        assert row.repaired_positions == (15,)  # call 1's final <turn_end> repaired from call 2's prefill
        assert row.generation_policy_version == 0
    m = out.expected.exact_metrics
    assert (m[M.NUM_PHYSICAL_ROWS], m[M.NUM_PADDING_ROWS], m[M.TOTAL_NUM_TOKENS]) == (2, 0, 52)
    assert (m[M.ADVANTAGES_SUM], m[M.ADVANTAGES_MIN], m[M.ADVANTAGES_MAX]) == (0.0, -1.0, 1.0)


def test_reasoning_recency_boundary_splits_one_rollout_into_two_rows_with_a_sentinel():
    out = _outcome({"group_size": 1, "rewards": {"fixed": 1.0}, "compaction": "recency-reasoning-last1",
                    "script": {"task": "Hi", "turns": [
                        {"reasoning": "p", "tool_calls": [{"name": "f"}], "tool_results": [{"output": "r"}],
                         "logprobs": [-1, -2, -3, -4, -5, -6, -7, -8, -9, -10]},
                        {"reasoning": "q", "tool_calls": [{"name": "g"}], "tool_results": [{"output": "s"}],
                         "logprobs": [-0.5, -1.5, -2.5, -3.5, -4.5, -5.5, -6.5, -7.5, -8.5, -9.5]},
                        {"reasoning": "t", "text": "x", "logprobs": [-0.25, -0.75, -1.25, -1.75, -2.25]},
                    ]}})
    (rollout,) = out.expected.rollouts
    assert [t.turn_ids for t in rollout.traces] == [(1, 2), (3,)]
    assert [t.start_reason for t in rollout.traces] == ["rollout_start", "declared_boundary"]
    first, second = out.expected.rows
    assert list(first.input_ids) == HEAD + [9, 144, 10] + CALL_F + TOOL_R + [3, 7] + [9, 145, 10] + CALL_G
    assert first.mask_spans == ((8, 18), (26, 36))
    assert first.generation_logprobs == (-1, -2, -3, -4, -5, -6, -7, -8, -9, -10,
                                         -0.5, -1.5, -2.5, -3.5, -4.5, -5.5, -6.5, -7.5, -8.5, -9.5)
    assert first.sentinel_positions == (35,) and first.repaired_positions == (17,)
    assert first.routes.shape == (36, 2, 2)
    assert first.routes[35].tolist() == [[-1, -1], [-1, -1]]  # boundary: the sentinel, never the placeholder
    assert first.routes[17].tolist() == [[3, 1], [1, 0]]  # repaired from call 2's prefill
    # call 1's <think>p</think> is gone from call 3's prompt; call 2's reasoning stays
    assert list(second.input_ids) == (HEAD + CALL_F + TOOL_R + [3, 7] + [9, 145, 10] + CALL_G + TOOL_S + [3, 7]
                                      + [9, 148, 10, 152, 4])
    assert second.mask_spans == ((41, 46),)
    assert second.generation_logprobs == (-0.25, -0.75, -1.25, -1.75, -2.25)
    assert second.sentinel_positions == () and second.repaired_positions == ()
    assert second.routes[45].tolist() == [[0, 1], [0, 1]]  # the final trace keeps vLLM's placeholder
    assert first.advantage == second.advantage == 0.0  # a group of one
    m = out.expected.exact_metrics
    assert (m[M.NUM_SPLIT_ROLLOUTS], m[M.ROWS_PER_ROLLOUT_MAX], m[M.TOTAL_NUM_TOKENS]) == (1, 2, 82)


def test_image_recency_k1_row_owns_only_the_image_its_last_prompt_shows():
    out = _outcome({"group_size": 1, "rewards": {"fixed": 1.0}, "compaction": "recency-images-k1-nomarker",
                    "routes": False, "script": {"task": "Hi", "turns": [
                        {"tool_calls": [{"name": "f"}], "logprobs": [-1, -1, -1, -1, -1, -1, -0.5],
                         "tool_results": [{"output": "r", "images": [
                             {"kind": "shape", "shape": "square", "key": "a", "width": 8, "height": 8}]}]},
                        {"tool_calls": [{"name": "g"}], "logprobs": [-2, -2, -2, -2, -2, -2, -0.25],
                         "tool_results": [{"output": "s", "images": [
                             {"kind": "shape", "shape": "cross", "key": "b", "width": 8, "height": 8}]}]},
                        {"text": "x", "logprobs": [-3, -0.125]},
                    ]}})
    first, second = out.expected.rows
    assert list(first.input_ids) == HEAD + CALL_F + TOOL_R + IMAGE_MSG + [3, 7] + CALL_G
    assert first.mask_spans == ((8, 15), (30, 37))
    assert first.generation_logprobs == (-1, -1, -1, -1, -1, -1, -0.5, -2, -2, -2, -2, -2, -2, -0.25)
    assert first.media_ids == ("media-926920c5355a0321f3c68e8b",)
    assert first.pixel_digests == ("2ed3aed2106bced300145e40114491d290bd5d106c8597cb9ca9e45895f6d62b",)
    # image a is dropped (no marker), image b is shown: a new trace owning b only
    assert list(second.input_ids) == HEAD + CALL_F + TOOL_R + [3, 7] + CALL_G + TOOL_S + IMAGE_MSG + [3, 7, 152, 4]
    assert second.mask_spans == ((45, 47),)
    assert second.media_ids == ("media-5f70309525433a1013925e8f",)
    assert second.pixel_digests == ("70fcf970dc3498fdc90b210a245cc09e59615360827385c910eb743cb2810102",)
    assert first.routes is None and first.sentinel_positions == ()  # no routes recorded: nothing to stamp


def test_graded_group_with_mask_sample_gets_leave_one_out_normalised_advantages_and_padding():
    out = _outcome({"group_size": 3, "rewards": {"by_index": {0: 1.0, 1: 0.5, 2: 0.0}}, "mask_sample": [1],
                    "routes": False, "trainer": {"policy": {"dp_size": 2}},
                    "script": {"task": "Hi", "turns": [{"text": "ok", "logprobs": [-0.25, -0.5, -0.125]}]}})
    # r0: others (0.5, 0): b 0.25, std sqrt(0.125); A = 0.75 / (0.35355339 + 1e-6) = 2.12131434...
    # r1: others (1, 0): b 0.5 -> A 0 (masked, still in the baseline); r2 mirrors r0
    assert [r.advantage for r in out.expected.rollouts] == pytest.approx([2.1213143435766133, 0.0, -2.1213143435766133],
                                                                         rel=1e-15)
    assert [r.mask_sample for r in out.expected.rollouts] == [False, True, False]
    rows = out.expected.rows
    assert [list(r.input_ids) for r in rows] == [HEAD + [143, 139, 4]] * 3
    assert [r.sample_mask for r in rows] == [1.0, 0.0, 1.0]
    assert [r.mask_spans for r in rows] == [((8, 11),)] * 3
    m = out.expected.exact_metrics
    assert (m[M.NUM_PHYSICAL_ROWS], m[M.NUM_PADDING_ROWS], m[M.NUM_MASK_SAMPLE_FILTERED], m[M.TOTAL_NUM_TOKENS]) == (3, 1, 1, 33)
    assert m[M.LOGICAL_ADVANTAGES_SUM] == 0.0


def test_truncated_final_turn_trains_its_tokens_without_a_stop_token():
    out = _outcome({"group_size": 1, "rewards": {"fixed": 0.0}, "routes": False, "script": {"task": "Hi", "turns": [
        {"text": "ok", "finish_reason": "length", "logprobs": [-0.75, -0.25]}]}})
    (row,) = out.expected.rows
    assert list(row.input_ids) == HEAD + [143, 139]  # no <turn_end>: the length limit cut it
    assert row.mask_spans == ((8, 10),)
    assert row.generation_logprobs == (-0.75, -0.25)
    assert row.advantage == 0.0
    assert out.expected.exact_metrics[M.TOTAL_NUM_TOKENS] == 10
