"""The materializer: exact rows, masks, logprobs, advantages, padding, media, metrics and every error."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
import torch

from compactsim.harness.core import metrics as M
from compactsim.harness.core.errors import ContractError
from compactsim.harness.core.evidence import MediaAsset
from compactsim.harness.core.images import png_data_url
from compactsim.harness.core.trace_plan import TracePlan, Violation
from compactsim.harness.pipeline.advantages import compute_logical_advantages
from compactsim.harness.pipeline.materializer import materialize, prepare_trace_batch
from compactsim.harness.pipeline.train_config import MaterializeConfig, TrainerConfig
from tests.unit.pipeline.materializer_builders import make_rollout, replan, token_base

torch.set_num_threads(1)


def _batch(plans, **cfg):
    logical = compute_logical_advantages([p.evidence for p in plans])
    return prepare_trace_batch(plans, None, logical, MaterializeConfig(**cfg))


def _error(plans, **cfg) -> ContractError:
    with pytest.raises(ContractError) as info:
        _batch(plans, **cfg)
    return info.value


def _group(rewards, segments_per_rollout, group="g0", **kw):
    return [
        make_rollout(f"{group}-r{i}", segs, group=group, reward=r, index=i, **kw)[1]
        for i, (r, segs) in enumerate(zip(rewards, segments_per_rollout, strict=True))
    ]


# ---------------------------------------------------------------------------------------------
# rows


def test_row_is_the_last_prompt_plus_sampled_ids_with_mask_on_every_calls_sampled_ids():
    ev, plan = make_rollout("r0", [[(3, 2), (2, 2)]])
    b = token_base("r0")
    batch = _batch([plan])
    assert batch.row_input_ids.tolist() == [[b + i for i in range(9)]]
    assert batch.row_token_mask.tolist() == [[0, 0, 0, 1, 1, 0, 0, 1, 1]]
    assert batch.row_mask_spans == (((3, 5), (7, 9)),)
    assert batch.row_input_lengths.tolist() == [9]
    assert batch.row_input_lengths.dtype == torch.int32
    assert batch.parent_indices.tolist() == [0]
    assert batch.row_sample_mask.tolist() == [1.0]


def test_generation_logprobs_sit_at_each_sampled_tokens_own_position():
    _, plan = make_rollout("r0", [[(3, 2), (2, 2)]])
    batch = _batch([plan], logprob_dtype="float64")
    assert batch.row_generation_logprobs.dtype == torch.float64
    assert batch.row_generation_logprobs.tolist() == [[0, 0, 0, -0.01, -0.02, 0, 0, -0.011, -0.021]]


def test_advantage_is_on_the_mask_and_zero_elsewhere():
    plans = _group([0.0, 1.0], [[[(3, 2), (2, 2)]], [[(2, 1)]]])
    batch = _batch(plans, logprob_dtype="float64")
    assert batch.row_advantages[0].tolist() == [0, 0, 0, -1, -1, 0, 0, -1, -1]
    assert batch.row_advantages[1].tolist() == [0, 0, 1, 0, 0, 0, 0, 0, 0]


def test_each_row_gets_its_own_parents_advantage_not_the_first_rollouts():
    # a `logical_advantages[0]`-everywhere regression gives every row -1.5/(std+eps)
    plans = _group([1.0, 2.0, 3.0], [[[(2, 1)], [(1, 2)]], [[(2, 2)]], [[(1, 1)], [(2, 1)], [(1, 3)]]])
    batch = _batch(plans, logprob_dtype="float64")
    logical = [r.advantage for r in batch.logical]
    assert logical[1] == 0.0 and logical[0] == -logical[2] != 0.0
    assert batch.parent_indices.tolist() == [0, 0, 1, 2, 2, 2]
    for row, parent in enumerate(batch.parent_indices.tolist()):
        mask = batch.row_token_mask[row] > 0
        assert torch.all(batch.row_advantages[row][mask] == logical[parent])
        assert torch.all(batch.row_advantages[row][~mask] == 0)


def test_compacted_rollout_becomes_one_row_per_trace_with_its_own_prompt():
    _, plan = make_rollout("r0", [[(3, 2)], [(2, 2), (1, 1)]])
    b = token_base("r0")
    batch = _batch([plan])
    # trace 1 starts from a rewritten context (b-1, then 2 new tokens), then sampled 2, +1, sampled 1
    assert batch.row_input_ids.tolist() == [
        [b, b + 1, b + 2, b + 3, b + 4, 0, 0],
        [b - 1, b + 5, b + 6, b + 7, b + 8, b + 9, b + 10],
    ]
    assert batch.row_token_mask.tolist() == [[0, 0, 0, 1, 1, 0, 0], [0, 0, 0, 1, 1, 0, 1]]
    assert batch.row_physical_trace_id == ("r0/trace-0", "r0/trace-1")
    assert batch.row_logical_rollout_id == ("r0", "r0")
    assert batch.row_trace_index.tolist() == [0, 1]
    assert batch.logical[0].row_indices == (0, 1)


def test_single_trace_rollout_produces_the_legacy_flattened_row():
    ev, plan = make_rollout("r0", [[(3, 2), (2, 3), (4, 1)]], layout=(2, 2))
    batch = _batch([plan], logprob_dtype="float64")
    ids, mask, lps, routes = _legacy_flatten(ev)
    n = len(ids)
    assert batch.row_input_ids[0, :n].tolist() == ids
    assert batch.row_token_mask[0, :n].tolist() == mask
    assert batch.row_generation_logprobs[0, :n].tolist() == lps
    assert np.array_equal(batch.routed_experts[0, :n].numpy(), routes)


def _legacy_flatten(ev):
    """NeMo-RL's message-log path (nemo_gym.py §1.5-§1.6), written independently."""
    seen: list[int] = []
    ids: list[int] = []
    mask: list[int] = []
    lps: list[float] = []
    pieces: list[np.ndarray] = []
    for call in ev.calls:
        p, g, r = list(call.prompt_token_ids), list(call.sampled_token_ids), call.routed_experts
        assert p[: len(seen)] == seen
        if pieces and r is not None:
            pieces[-1][-1] = r[len(seen) - 1]  # repair the previous assistant's last token
        ids += p[len(seen):] + g
        mask += [0] * (len(p) - len(seen)) + [1] * len(g)
        lps += [0.0] * (len(p) - len(seen)) + list(call.sampled_logprobs)
        pieces += [r[len(seen): len(p)].copy(), r[len(p): len(p) + len(g)].copy()]
        seen = p + g
    return ids, mask, lps, np.concatenate(pieces)


def test_rows_do_not_depend_on_the_order_rollouts_arrive_in():
    plans = _group([0.3, 0.9, 0.1], [[[(2, 2)], [(1, 1)]], [[(3, 1)]], [[(1, 2), (1, 1)]]], layout=(1, 2))
    reference = _batch(plans, dp_size=2)
    for order in itertools.permutations(plans):
        batch = _batch(list(order), dp_size=2)
        for name in ("row_input_ids", "row_token_mask", "row_generation_logprobs", "row_advantages", "parent_indices",
                     "routed_experts", "row_sample_mask", "row_input_lengths"):
            assert torch.equal(getattr(batch, name), getattr(reference, name)), name
        assert batch.row_physical_trace_id == reference.row_physical_trace_id


def test_mask_sample_rollout_keeps_its_advantage_and_leaves_the_loss():
    plans = _group([0.0, 1.0], [[[(2, 1)]], [[(2, 1)], [(1, 1)]]])
    flagged = replan(plans[1], replace(plans[1].evidence, mask_sample=True))
    batch = _batch([plans[0], flagged])
    assert batch.row_sample_mask.tolist() == [1.0, 0.0, 0.0]
    assert batch.logical[1].mask_sample is True and batch.logical[1].advantage == 1.0
    assert batch.metrics()[M.NUM_MASK_SAMPLE_FILTERED] == 1


def test_generation_policy_version_is_recorded_per_row():
    _, plan = make_rollout("r0", [[(2, 1)], [(1, 1)]], version=7)
    batch = _batch([plan], dp_size=3)
    assert batch.row_generation_policy_version.tolist() == [7, 7, -1]
    assert batch.logical[0].generation_policy_version == 7


# ---------------------------------------------------------------------------------------------
# padding


def test_padding_rows_are_added_after_rows_are_combined():
    plans = _group([0.0, 1.0], [[[(2, 1)], [(1, 1)]], [[(3, 2)]]])
    batch = _batch(plans, dp_size=2, micro_batch_size=2)
    assert batch.num_rows == 4 and batch.num_real_rows == 3 and batch.num_padding_rows == 1
    assert batch.parent_indices.tolist() == [0, 0, 1, -1]
    assert batch.row_input_ids[3].tolist() == [0] * batch.seq_len
    assert batch.row_token_mask[3].sum() == 0 and batch.row_advantages[3].sum() == 0
    assert batch.row_sample_mask[3] == 0 and batch.row_input_lengths[3] == 0
    assert batch.row_trace_index[3] == -1
    assert batch.row_logical_rollout_id[3] is None and batch.row_physical_trace_id[3] is None
    assert batch.row_media_ids[3] == () and batch.row_pixel_values[3] == ()


def test_no_padding_when_rows_already_divide():
    plans = _group([0.0, 1.0], [[[(2, 1)]], [[(3, 2)]]])
    assert _batch(plans, dp_size=2).num_padding_rows == 0


def test_sequence_length_is_padded_to_the_configured_multiple():
    _, plan = make_rollout("r0", [[(3, 2), (2, 2)]])
    batch = _batch([plan], make_sequence_length_divisible_by=8, pad_token_id=5)
    assert batch.seq_len == 16
    assert batch.row_input_ids[0, 9:].tolist() == [5] * 7
    assert batch.row_input_lengths.tolist() == [9]


def test_padding_never_changes_a_real_row():
    plans = _group([0.2, 0.8], [[[(2, 1)], [(1, 1)]], [[(3, 2)]]], layout=(2, 2))
    plain = _batch(plans)
    padded = _batch(plans, dp_size=4, micro_batch_size=2, make_sequence_length_divisible_by=16)
    n, s = plain.num_rows, plain.seq_len
    for name in ("row_input_ids", "row_token_mask", "row_generation_logprobs", "row_advantages", "routed_experts"):
        assert torch.equal(getattr(padded, name)[:n, :s], getattr(plain, name)), name
    assert padded.metrics()[M.TOTAL_NUM_TOKENS] == plain.metrics()[M.TOTAL_NUM_TOKENS] == 3 + 3 + 5


# ---------------------------------------------------------------------------------------------
# media


def _png(value: int) -> str:
    return png_data_url(np.full((2, 3, 3), value, dtype=np.uint8))


def _asset(media_id: str, url: str) -> MediaAsset:
    return MediaAsset(media_id=media_id, content_digest=None, source_part={"type": "input_image", "image_url": url})


def test_trace_after_a_boundary_re_owns_all_its_images_in_prompt_order():
    assets = {"screen-a": _asset("screen-a", _png(10)), "screen-b": _asset("screen-b", _png(200))}
    _, plan = make_rollout(
        "r0", [[(3, 2), (2, 2)], [(4, 1)]], media=[[], ["screen-a"], ["screen-a", "screen-b"]], media_assets=assets
    )
    batch = _batch([plan])
    assert batch.row_media_ids == (("screen-a",), ("screen-a", "screen-b"))
    (a1,), (a2, b2) = batch.row_pixel_values
    assert a1.shape == (3, 2, 3) and a1.dtype == torch.float64
    assert torch.equal(a1, torch.full((3, 2, 3), 10 / 255, dtype=torch.float64))
    assert torch.equal(b2, torch.full((3, 2, 3), 200 / 255, dtype=torch.float64))
    assert a2 is a1  # decoded once per batch


def test_duplicate_media_ids_are_kept_and_identical_images_decoded_once():
    same = _png(7)
    assets = {"x": _asset("x", same), "y": _asset("y", same)}
    _, plan = make_rollout("r0", [[(3, 2)]], media=[["x", "y", "x"]], media_assets=assets)
    batch = _batch([plan])
    assert batch.row_media_ids == (("x", "y", "x"),)
    px = batch.row_pixel_values[0]
    assert px[0] is px[1] is px[2]


def test_missing_media_asset_is_an_error_naming_the_media_id():
    _, plan = make_rollout("r0", [[(3, 2), (1, 1)]], media=[[], ["ghost"]])
    err = _error([plan])
    assert err.code == "unknown_media_asset"
    assert err.rollout_id == "r0" and err.turn_id == 2
    assert "media id 'ghost' is not in media_assets (0 assets" in str(err)


def test_undecodable_media_asset_is_an_error_naming_the_media_id():
    assets = {"bad": _asset("bad", "data:image/png;base64,aGVsbG8=")}
    _, plan = make_rollout("r0", [[(3, 2)]], media=[["bad"]], media_assets=assets)
    err = _error([plan])
    assert err.code == "media_decode"
    assert "media id 'bad': image bytes do not decode" in str(err)


def test_media_asset_given_as_a_path_is_refused_not_read():
    assets = {"p": _asset("p", "/etc/passwd")}
    _, plan = make_rollout("r0", [[(3, 2)]], media=[["p"]], media_assets=assets)
    err = _error([plan])
    assert err.code == "media_decode"
    assert "media id 'p': image_url '/etc/passwd': only base64 data:image/... URLs are accepted" in str(err)


def test_media_asset_without_an_image_url_is_a_decode_error():
    assets = {"n": MediaAsset(media_id="n", content_digest=None, source_part={"type": "input_text"})}
    _, plan = make_rollout("r0", [[(3, 2)]], media=[["n"]], media_assets=assets)
    err = _error([plan])
    assert err.code == "media_decode"
    assert "media id 'n': source_part has no image_url (keys ['type'])" in str(err)


# ---------------------------------------------------------------------------------------------
# metrics


def test_batch_metrics_have_the_documented_values():
    plans = _group([1.0, 2.0, 3.0], [[[(2, 1)], [(1, 2)]], [[(2, 2)]], [[(1, 1)], [(2, 1)], [(1, 3)]]])
    flagged = replan(plans[1], replace(plans[1].evidence, mask_sample=True))
    batch = _batch([plans[0], flagged, plans[2]], dp_size=4, logprob_dtype="float64")
    a = batch.logical[2].advantage
    m = batch.metrics()
    assert list(m) == list(M.BATCH_METRIC_KEYS)
    assert m[M.NUM_PHYSICAL_ROWS] == 6
    assert m[M.NUM_PADDING_ROWS] == 2
    assert m[M.NUM_LOGICAL_ROLLOUTS] == 3
    assert m[M.NUM_SPLIT_ROLLOUTS] == 2
    assert m[M.ROWS_PER_ROLLOUT_MAX] == 3
    assert m[M.LOGICAL_ADVANTAGES_SUM] == pytest.approx(0.0, abs=1e-12)
    assert m[M.LOGICAL_ADVANTAGES_MEAN] == pytest.approx(0.0, abs=1e-12)
    # NeMo-RL's advantages/sum: the unmasked [R, S] tensor, every row broadcast over S = 5 (the longest row):
    # rollout 0's two rows at -a, rollout 1's row at 0, rollout 2's three rows at +a
    assert m[M.ADVANTAGES_SUM] == pytest.approx(5 * (-2 * a + 3 * a), rel=1e-12)
    # mean/min/max over trained tokens: rollout 0 has 3 sampled tokens at -a, rollout 1 two at 0, rollout 2 five at +a
    assert m[M.ADVANTAGES_MEAN] == pytest.approx(2 * a / 10, rel=1e-12)
    assert m[M.ADVANTAGES_MIN] == pytest.approx(-a, rel=1e-12)
    assert m[M.ADVANTAGES_MAX] == pytest.approx(a, rel=1e-12)
    assert m[M.NUM_MASK_SAMPLE_FILTERED] == 1
    assert m[M.TOTAL_NUM_TOKENS] == 3 + 4 + 4 + 2 + 4 + 5
    # the reference PR's keys, with its meanings
    assert m[M.SCHEDULER_STEP_INCREMENT] == m[M.PR_LOGICAL_ROLLOUTS] == 3
    assert (m[M.PR_PHYSICAL_TRACES], m[M.PR_PADDING_ROWS], m[M.PR_PHYSICAL_ROWS]) == (6, 2, 8)
    assert m[M.PR_ELIGIBLE_ACTION_TOKENS] == 1 + 2 + 2 + 1 + 1 + 3


def test_batch_metrics_never_claim_step_counts():
    """Counts are measured from the optimizer and scheduler, never written by the batch as constants."""
    split = _group([0.0, 1.0], [[[(2, 1)], [(1, 1)], [(1, 1)]], [[(2, 1)], [(1, 1)], [(1, 1)]]])
    m = _batch(split).metrics()
    assert m[M.NUM_PHYSICAL_ROWS] == 6
    assert M.SCHEDULER_INCREMENTS not in m and M.OPTIMIZER_STEPS not in m
    assert m[M.SCHEDULER_STEP_INCREMENT] == 2  # the reference PR's key: logical rollouts, not the 6 rows


# ---------------------------------------------------------------------------------------------
# sharding helpers for the training loop


def test_rows_shard_into_contiguous_ranks_and_microbatches():
    plans = _group([0.0, 1.0, 0.5], [[[(2, 1)], [(1, 1)]], [[(3, 2)]], [[(1, 1)]]])
    batch = _batch(plans, dp_size=2, micro_batch_size=2)
    assert batch.num_rows == 4
    assert batch.rank_rows(0) == range(0, 2) and batch.rank_rows(1) == range(2, 4)
    assert batch.microbatch_rows(1) == (range(2, 4),)
    sel = batch.select(batch.microbatch_rows(1)[0])
    assert sel["parent_indices"].tolist() == [1, 2]
    assert torch.equal(sel["row_input_ids"], batch.row_input_ids[2:4])
    with pytest.raises(ValueError, match=r"dp_rank=2 outside \[0, 2\)"):
        batch.rank_rows(2)


def test_global_valid_tokens_count_trainable_tokens_of_rows_in_the_loss():
    plans = _group([0.0, 1.0], [[[(2, 1)], [(1, 1)]], [[(3, 2)]]])
    flagged = replan(plans[1], replace(plans[1].evidence, mask_sample=True))
    assert _batch([plans[0], flagged], dp_size=4).global_valid_tokens() == 2


def test_materialize_derives_both_configs_from_the_trainer_config():
    plans = _group([0.0, 1.0], [[[(2, 1)], [(1, 1)]], [[(3, 2)]]])
    cfg = TrainerConfig.model_validate(
        {"grpo": {"num_generations_per_prompt": 2, "num_prompts_per_step": 1},
         "policy": {"train_global_batch_size": 2, "dp_size": 2, "logprob_dtype": "float64"}}
    )
    batch = materialize(plans, cfg)
    assert batch.num_rows == 4 and batch.row_advantages.dtype == torch.float64
    assert [r.advantage for r in batch.logical] == [-1.0, 1.0]


# ---------------------------------------------------------------------------------------------
# fail loud


def test_duplicate_logical_rollout_id_is_rejected():
    _, a = make_rollout("r0", [[(2, 1)]], index=0)
    _, b = make_rollout("r0", [[(3, 1)]], index=1)
    logical = compute_logical_advantages([a.evidence])
    with pytest.raises(ContractError) as info:
        prepare_trace_batch([a, b], None, logical, MaterializeConfig())
    assert info.value.code == "duplicate_logical_rollout_id"
    assert "'r0' ×2" in str(info.value)


def test_duplicate_physical_trace_id_is_rejected():
    _, a = make_rollout("r0", [[(2, 1)]], index=0)
    _, b = make_rollout("r1", [[(3, 1)]], index=1)
    b = TracePlan(rollout_id="r1", path="single", traces=(replace(b.traces[0], trace_id="r0/trace-0"),), evidence=b.evidence)
    err = _error([a, b])
    assert err.code == "duplicate_physical_trace_id"
    assert err.rollout_id == "r1"
    assert "physical trace id 'r0/trace-0' occurs more than once in the batch" in str(err)


def test_incomplete_group_is_rejected():
    plans = _group([0.0, 1.0], [[[(2, 1)]], [[(3, 1)]]])
    logical = compute_logical_advantages([p.evidence for p in plans])
    with pytest.raises(ContractError) as info:
        prepare_trace_batch(plans, None, logical, MaterializeConfig(num_generations_per_prompt=4))
    assert info.value.code == "incomplete_group"
    assert "group 'g0' has 2 rollout(s)" in str(info.value)


def test_trace_with_no_model_call_is_rejected():
    _, plan = make_rollout("r0", [[(2, 1)]])
    empty = replace(plan.traces[0], trace_id="r0/trace-1", trace_index=1, call_indices=())
    plan = TracePlan(rollout_id="r0", path="physical", traces=(plan.traces[0], empty), evidence=plan.evidence)
    err = _error([plan])
    assert err.code == "empty_trace"
    assert "physical trace 'r0/trace-1' (index 1) has no model call" in str(err)


def test_rollout_with_no_sampled_token_is_rejected():
    _, plan = make_rollout("r0", [[(2, 0), (1, 0)]])
    err = _error([plan])
    assert err.code == "no_eligible_tokens"
    assert err.rollout_id == "r0"
    assert "the rollout has 2 model call(s) and no sampled token to train on" in str(err)


def test_empty_batch_is_rejected():
    with pytest.raises(ContractError) as info:
        prepare_trace_batch([], None, compute_logical_advantages([]), MaterializeConfig())
    assert info.value.code == "no_eligible_tokens"
    assert "the batch has no rollouts" in str(info.value)


def test_sync_batch_mixing_policy_versions_is_rejected():
    _, a = make_rollout("a", [[(2, 1)]], group="ga", version=1)
    _, b = make_rollout("b", [[(2, 1)]], group="gb", version=2)
    err = _error([a, b])
    assert err.code == "mixed_policy_versions"
    assert "one sync optimizer batch mixes generation policy versions [1, 2]" in str(err)


def test_async_batch_mixing_versions_across_groups_needs_importance_sampling_correction():
    _, a = make_rollout("a", [[(2, 1)]], group="ga", version=1)
    _, b = make_rollout("b", [[(2, 1)]], group="gb", version=2)
    err = _error([a, b], async_mode=True)
    assert err.code == "mixed_policy_versions"
    assert "across groups without importance-sampling correction" in str(err)
    batch = _batch([a, b], async_mode=True, use_importance_sampling_correction=True)
    assert batch.row_generation_policy_version.tolist() == [1, 2]


def test_async_group_mixing_policy_versions_is_rejected_even_with_correction():
    _, a = make_rollout("a", [[(2, 1)]], group="g", version=1, index=0)
    _, b = make_rollout("b", [[(2, 1)]], group="g", version=2, index=1)
    err = _error([a, b], async_mode=True, use_importance_sampling_correction=True)
    assert err.code == "mixed_policy_versions"
    assert "group 'g' mixes generation policy versions [1, 2]" in str(err)


def test_rollout_whose_calls_span_policy_versions_is_rejected():
    ev, plan = make_rollout("a", [[(2, 1), (1, 1)]], version=1)
    calls = (ev.calls[0], replace(ev.calls[1], policy_version=2))
    err = _error([replan(plan, replace(ev, calls=calls))], async_mode=True, use_importance_sampling_correction=True)
    assert err.code == "mixed_policy_versions"
    assert err.rollout_id == "a"
    assert "the calls of one rollout were generated by policy versions [1, 2]" in str(err)


def test_trace_whose_calls_are_not_prefix_continuations_is_rejected():
    ev, plan = make_rollout("r0", [[(3, 2), (2, 2)]])
    c1 = ev.calls[1]
    tampered = replace(c1, prompt_token_ids=c1.prompt_token_ids[:3] + (1, 2) + c1.prompt_token_ids[5:])
    err = _error([replan(plan, replace(ev, calls=(ev.calls[0], tampered)))])
    assert err.code == "undeclared_discontinuity"
    assert err.turn_id == 1
    assert "turn 1's sampled ids are not at positions [3, 5) of the trace's final row" in str(err)


def test_trace_whose_next_prompt_is_shorter_than_the_previous_context_is_rejected():
    ev, plan = make_rollout("r0", [[(3, 2), (2, 2)]])
    short = replace(ev.calls[1], prompt_token_ids=ev.calls[1].prompt_token_ids[:4])
    err = _error([replan(plan, replace(ev, calls=(ev.calls[0], short)))])
    assert err.code == "undeclared_discontinuity"
    assert "turn 2's prompt has 4 tokens, shorter than the previous call's prompt + sampled (5)" in str(err)


def test_sampled_ids_and_logprobs_of_different_lengths_are_rejected():
    ev, plan = make_rollout("r0", [[(3, 2)]])
    bad = replace(ev.calls[0], sampled_logprobs=(-0.1,))
    err = _error([replan(plan, replace(ev, calls=(bad,)))])
    assert err.code == "token_logprob_length_mismatch"
    assert "generation_token_ids has 2 ids, generation_log_probs has 1" in str(err)


def test_plan_with_violations_is_not_trainable():
    _, plan = make_rollout("r0", [[(3, 2)]])
    bad = TracePlan(rollout_id="r0", path="single", traces=plan.traces, evidence=plan.evidence,
                    violations=(Violation("append_declaration_mismatch", 2, "declared but not appended"),))
    err = _error([bad])
    assert err.code == "append_declaration_mismatch" and err.turn_id == 2
    assert "a plan with violations is not trainable (1 violation(s)); first: declared but not appended" in str(err)


def test_logical_advantages_of_another_batch_are_refused():
    _, a = make_rollout("a", [[(2, 1)]])
    _, b = make_rollout("b", [[(2, 1)]])
    with pytest.raises(ValueError, match="cover exactly the planned rollouts"):
        prepare_trace_batch([a], None, compute_logical_advantages([b.evidence]), MaterializeConfig())


def test_plan_that_skips_a_call_is_refused():
    _, plan = make_rollout("r0", [[(2, 1), (1, 1)]])
    partial = TracePlan(rollout_id="r0", path="single", traces=(replace(plan.traces[0], call_indices=(1,)),),
                        evidence=plan.evidence)
    with pytest.raises(ValueError, match=r"covers call indices \[1\]; expected each of 0..1 once"):
        _batch([partial])


def test_non_finite_generation_logprob_is_rejected():
    ev, plan = make_rollout("r0", [[(3, 2)], [(1, 1)]])
    bad = replace(ev.calls[1], sampled_logprobs=(float("nan"),))
    err = _error([replan(plan, replace(ev, calls=(ev.calls[0], bad)))])
    assert err.code == "malformed_payload"
    assert "physical trace 'r0/trace-1': generation logprobs contain NaN or inf" in str(err)


def test_evidence_given_beside_the_plans_must_be_their_rollouts():
    ev_a, a = make_rollout("a", [[(2, 1)]], index=0)
    ev_b, _ = make_rollout("b", [[(2, 1)]], index=1)
    logical = compute_logical_advantages([ev_a])
    assert prepare_trace_batch([a], [ev_a], logical, MaterializeConfig()).num_real_rows == 1
    with pytest.raises(ValueError, match=r"evidence rollouts \['b'\] differ from the plans' rollouts \['a'\]"):
        prepare_trace_batch([a], [ev_b], logical, MaterializeConfig())
