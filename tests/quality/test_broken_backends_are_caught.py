"""Each deliberately broken backend in tests/quality is caught by the audit with its paired finding."""

from __future__ import annotations

import functools
import importlib
import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from compactsim.harness.cli import app
from compactsim.harness.report.records import ScenarioRecord
from compactsim.harness.runner import RunOptions, resolve_scenarios, run_scenario

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

BROKEN = (
    "broadcast_first_advantage",
    "drop_boundary_sentinel",
    "own_only_new_images",
    "count_padding_tokens",
    "scheduler_per_row",
    "never_updates",
    "microbatch_normalised_loss",
    "row_mean_loss",
    "sequence_level_importance_weights",
    "routes_dropped",
    "extra_optimizer_steps",
    "mask_sample_trained",
    "moments_reset",
    "stale_weights_reloaded",
    "kl_penalty_times_beta",
    "valid_counts_ignore_sample_mask",
    "kl_not_dp_scaled",
    "clip_skipped_under_dp",
    "dual_clip_without_sign_guard",
    "warmup_then_constant_lr_third",
    "sample_mask_lost_under_dp",
    "reference_without_route_replay",
    "group_by_task_id",
    "group_by_first_prompt",
    "clip_before_normalising",
    "placeholder_not_repaired",
    "advantage_sum_after_clip",
    "one_version_per_batch",
    "gradient_accumulation_mean",
    "route_less_calls_backfilled_with_zero",
    "zero_advantage_microbatch_skipped",
    "mask_sample_keeps_kl",
    "scheduler_before_optimizer",
    # second red team: train-time bugs behind a right batch, and the catalogue's loss edge cases
    "routes_shifted_in_training_forward",
    "prev_logprobs_without_router_replay",
    "reference_without_router_replay",
    "images_of_previous_trace",
    "images_indexed_per_rank",
    "per_trace_advantages",
    "mask_sample_left_out_of_baseline",
    "dp_shard_drops_last_row",
    "logprobs_next_position",
    "prompt_tokens_in_loss_mask",
    "reference_refreshed_each_step",
    "clip_per_rank_before_allreduce",
    "zero_advantage_rows_left_out_of_normaliser",
    "scheduler_increment_counts_traces",
    "async_is_weights_against_behaviour_version",
    "normaliser_without_epsilon",
    "disable_ppo_ratio_ignored",
    "tis_without_lower_bound_untruncated",
    # the optimizer's own bugs behind a right loss and gradient (or a right loss alone)
    "adam_coupled_weight_decay",
    "adam_without_bias_correction",
    "gradient_never_zeroed",
    "frozen_embedding",
    "weight_decay_dropped",
    # a replaced train_step that forgets the trainer's refusals
    "trains_a_row_over_the_sequence_limit",
    # third red team: optimizer settings the weights alone cannot show, and an optimizer state the audit cannot read
    "adam_eps_1e6",
    "adam_beta2_095",
    "loss_scale_kept_in_own_keyed_adamw",
    "adam_second_moment_own_beta2",
    # fourth red team: entries no gradient reached must still move as the optimizer's own moments say
    "embedding_rows_updated_lazily",
    "weight_decay_only_where_the_gradient_is",
    "allreduce_mean_over_ranks_with_rows",
    # fifth red team: conditions no scenario had (pad == a sampled token, dp with warmup and decay, async on scripted
    # logprobs, no clip above norm 1, forced on-policy ratio, a floored logprob, rewards outside [0, 1] or not
    # bfloat16-exact, a zero clip bound, groups interleaved on arrival), and two caught as they were
    "pad_id_tokens_left_out_of_loss",
    "no_decay_by_ndim_on_flat_params",
    "warmup_counted_in_rank_samples",
    "async_fresh_rows_skip_importance_weights",
    "max_grad_norm_none_clips_at_one",
    "force_on_policy_ratio_without_gradient",
    "is_log_ratio_clamped_not_zeroed",
    "rewards_stored_in_bfloat16",
    "rewards_clamped_to_unit_interval",
    "advantage_clip_zero_bound_ignored",
    "groups_by_arrival_position",
    "importance_weights_on_kl_term",
    "warmup_sets_only_first_param_group",
    # sixth red team: the importance weights under a forced or disabled PPO ratio and k1's input / k3's output KL
    # clamps had no scenario (force-on-policy-ratio-importance-sampling, disable-ppo-ratio-importance-sampling,
    # kl-k1-input-clamp-binds, kl-k3-output-clamp-binds); the others were caught as they were
    "force_on_policy_drops_importance_weights",
    "reinforce_drops_importance_weights",
    "kl_input_clamp_skipped_for_k1",
    "kl_output_clamp_only_k1",
    "skip_backward_without_trained_tokens",
    "group_std_population",
    "loo_baseline_whole_group_std",
    "clip_each_parameter",
    "manual_decay_with_base_lr",
    "replay_routes_with_replay_off",
    "assistant_mask_from_template",
    "num_valid_samples_per_rollout",
    "advantages_stats_over_sample_mask",
    "per_rank_loss_normaliser",
    "grad_norm_after_clip",
    "lr_after_scheduler_step",
    # seventh red team; adam_bias_correction_from_group_step (FusedAdam's per-group step count after a skipped
    # parameter) passed every scenario until a rollout override's `steps` made one whose images start at step 2
    "adam_bias_correction_from_group_step",
    "warmup_from_zero",
    "importance_weights_inverted",
    "kl_log_ratio_reversed",
    "routes_of_first_layer_replayed_everywhere",
    "advantage_std_over_whole_batch",
    "generation_logprobs_in_next_token_frame",
    "packed_sequences_attention_leaks",
    "loss_metrics_averaged_over_ranks",
    "clip_coefficient_not_capped_at_one",
    "icepop_drops_tokens_from_loss_mask",
    "images_decoded_as_bgr",
    "mask_sample_only_on_final_trace",
    "advantages_normalised_per_rank",
    "prev_logprobs_from_generation",
    # a row's version capped one step behind the newest: only a group two steps stale shows it
    "staleness_capped_at_one_step",
    # micro-batches planned at the first step: only a batch that grows between steps (compaction from step 1) shows it
    "microbatch_schedule_fixed_at_first_step",
    # eighth red team: bugs that show only when a step differs from the one before
    "unused_parameters_fixed_at_first_step",
    "forward_width_fixed_at_first_step",
    "loss_normaliser_fixed_at_first_step",
    "reference_logprobs_cached_by_row_shape",
    "warmup_from_parameter_step_count",
    "pixel_buffers_reused_by_shape",
    "batch_checked_only_at_first_step",  # needs a refusal at step 1: the catalogue's verdict test now reads later steps
    # ninth: every catalogue mask_sample list masked the same indices in every group; a per-rollout override
    # (mask-sample-one-group) is what shows a flag keyed by rollout index
    "mask_sample_keyed_by_rollout_index",
    # settings the catalogue had only one at a time, rewards floats cannot hold, weights above the dual-clip bound
    # (68-red-team-9.yaml)
    "advantage_clip_only_when_normalized",
    "leave_one_out_forced_when_unnormalized",
    "std_below_epsilon_left_unnormalized",
    "one_pass_leave_one_out_std",
    "async_drops_truncation",
    "stale_rows_lose_mask_sample",
    "dual_clip_after_importance_weights",
    # tenth (69-red-team-10.yaml): a micro-batch straddling two rollouts, an over-long trace that is not the last, a first
    # trace of one call, a longest row that is already a multiple of the divisor
    "microbatch_sample_mask_from_first_row",
    "sequence_cap_on_last_rows_only",
    "sentinel_skipped_for_one_call_trace",
    "sequence_length_rounded_past_a_multiple",
    # eleventh (69-red-team-11.yaml): state carried across steps by rollout slot, a batch-wide baseline, a cap on
    # trained rows only
    "verify_answers_cached_by_slot",
    "mask_sample_cached_by_slot",
    "baseline_over_the_batch_without_leave_one_out",
    "sequence_cap_on_trained_rows_only",
    # twelfth (69-red-team-12.yaml): a padding count, a final trace and an image count taken from what never varied
    "padding_count_fixed_at_first_step",
    "final_trace_taken_as_longest",
    # thirteenth (69-red-team-13.yaml): a batch-wide media cache meets a task image shared by a group; a route-less
    # call or rollout away from a trace's end under replay off
    "media_dimensions_checked_on_decode_only",
    "media_digest_verified_once_per_id",
    "repair_skipped_after_route_less_call",
    "route_less_trace_gets_placeholder",
    # ...and, from its report, NeMo-RL's nrlre1 route envelope, which no valid payload carried to training before
    "route_envelope_layer_major",
    "task_images_from_first_prompt_of_batch",
    # fourteenth (69-red-team-14.yaml): settings the catalogue only ever ran for one step or never together
    "ref_pass_replays_with_replay_off",
    "warmup_samples_counted_in_rows",
    "clip_per_param_group",
    "reinforce_drops_kl_term",
    # fifteenth (69-red-team-15.yaml): a warmup that never met two prompt groups, tis above 1 without a lower bound,
    # async never with an advantage clip, normalisation or router replay off, rewards never beyond [-10, 10]
    "warmup_counted_in_prompts",
    "tis_lower_bound_defaults_to_reciprocal",
    "async_drops_advantage_clip",
    "async_advantages_with_estimator_defaults",
    "rewards_clipped_to_ten",
    "async_replays_routes_with_replay_off",
)
#: Backends that train right but report one loss metric wrong: `train.metric` must name `EXPECTED_KEY`.
MISREPORTING = (
    "sampling_importance_ratio_sequence_exp_sum",
    "probs_ratio_extrema_over_padding",
    "probs_ratio_empty_microbatch_minus_one",
    "is_oob_ratio_over_all_positions",
    "mismatch_kl_always_k3",
    "reward_mean_over_physical_rows",
    # sixth red team
    "token_mult_prob_error_microbatch_mean",
    # ninth red team: a truncated run with a masked rollout
    "is_oob_ratio_counts_masked_rows",
    # eleventh: the step's mean reward logged one step late
    "reward_logged_from_previous_step",
    # fourteenth: a fraction averaged over data-parallel ranks, each already over the global token count
    "is_oob_ratio_mean_over_ranks",
    # fifteenth: an async step's reward logged from its freshest groups only
    "async_reward_logged_from_fresh_groups",
)
#: Backends that fail outright: the run must end in a `backend.error` finding, not a crash.
CRASHING = ("crashing_train_step", "malformed_result", "exits_the_process", "unprintable_error", "version_not_advanced",
            "trained_version_mislabelled", "raises_its_own_base_exception", "padding_rows_sample_mask_one",
            "plan_returns_none", "raises_generator_exit")


@functools.cache
def record_of(scenario: str, backend: str | None = None) -> ScenarioRecord:
    """One run of `scenario` through `backend` (the reference when None) per test session.

    Several tests read the same run: the paired-finding test of a broken backend and the test
    naming that bug's rows, steps or counts exactly. A record is never mutated by a test.
    """
    options = RunOptions() if backend is None else RunOptions(backend=backend)
    return run_scenario(resolve_scenarios([scenario])[0], options).record


@pytest.mark.parametrize("module", BROKEN)
def test_broken_backend_provokes_its_paired_finding(module: str):
    mod = importlib.import_module(f"tests.quality.{module}")
    spec = f"tests.quality.{module}:Backend"
    rec = record_of(mod.SCENARIO, spec)
    assert not rec.passed
    assert rec.observed == "success"  # the trainer ran; only the audit can tell
    hits = [f for f in rec.findings if f.check == mod.EXPECTED_CHECK]
    assert hits, [f.check for f in rec.findings]
    assert all(f.reproduce == f"compactsim run {mod.SCENARIO} --seed 0 --backend {spec}" for f in rec.findings)


def test_a_frozen_embedding_is_named_as_a_skipped_parameter_that_rows_reach():
    """AdamW skipping a parameter is allowed only where no row reached it (`correct_plain_torch_loop` passes)."""
    rec = record_of("image-compaction-k2-rolling", "tests.quality.frozen_embedding:Backend")
    skipped = [f for f in rec.findings if f.check == "counts.optimizer"]
    assert skipped and {(f.row, f.actual) for f in skipped} == {("tok_emb.weight", "tok_emb.weight")}
    assert [f.step for f in skipped] == list(range(rec.steps))


def test_weights_the_server_refuses_end_the_run_after_the_step_keeping_its_findings():
    """A NaN left in the weights: the step's `train.update` names the parameter, the push after it is the observed error."""
    spec = "tests.quality.non_finite_weights:Backend"
    rec = record_of("layout-dp2-kl-steps-clip-binds", spec)
    assert (rec.passed, rec.observed, rec.steps) == (False, "error:weights_refused", 1)
    assert [(f.check, f.step) for f in rec.findings] == [("verdict.unexpected_error", 0), ("train.update", 0)]
    assert rec.findings[1].row == "patch_pos"
    assert (rec.error.stage, rec.error.step) == ("weights", 0)
    assert rec.error.message == ("the generation server refused the weights after step 0: body: parameter 'patch_pos' holds "
                                 "1 non-finite value(s), the first at [0, 0]: nan; the served weights stay at policy_version 0")


def test_an_envelope_header_read_in_the_wrong_order_is_refused_by_the_policy_once_layers_differ_from_top_k():
    """`routes-nrlre1-three-layers-top2`: the misread [S, 2, 3] rows reach the policy, which refuses them; with the
    default router (2 layers, top-2) the misread array is the right one, so `routes-nrlre1-envelope` passes."""
    spec = "tests.quality.route_envelope_dims_misread:Backend"
    assert record_of("routes-nrlre1-envelope", spec).passed
    rec = record_of("routes-nrlre1-three-layers-top2", spec)
    assert (rec.passed, rec.observed) == (False, "error:invalid_argument")
    [finding] = rec.findings
    assert finding.check == "verdict.unexpected_error"
    assert "routes has shape (1, 286, 2, 3); expected (1, 286, 3, 2) (B, S, L, K)" in finding.message


def test_images_handed_back_by_the_first_rows_count_stop_the_step_that_shows_uneven_counts():
    """A micro-batch whose rows show 2 and 4 screenshots: chunks of the first row's count leave a row image tokens
    without their pixels, which the policy refuses; every catalogue micro-batch before held equal counts."""
    spec = "tests.quality.microbatch_images_chunked_by_first_row:Backend"
    rec = record_of("microbatch-rows-different-image-counts", spec)
    assert (rec.passed, rec.observed, rec.steps) == (False, "error:invalid_argument", 0)
    [finding] = rec.findings
    assert (finding.check, finding.step) == ("verdict.unexpected_error", 0)
    assert finding.message.endswith("<|image|> tokens but 2 images x 4 patches")
    assert record_of("microbatch-rows-different-image-counts").passed  # the reference keeps each row's own images


@pytest.mark.parametrize("module", MISREPORTING)
def test_a_misreported_loss_metric_is_named_by_its_key_and_nothing_else_is_found(module: str):
    mod = importlib.import_module(f"tests.quality.{module}")
    spec = f"tests.quality.{module}:Backend"
    rec = record_of(mod.SCENARIO, spec)
    assert (rec.passed, rec.observed) == (False, "success")
    assert {f.check for f in rec.findings} == {mod.EXPECTED_CHECK} == {"train.metric"}  # the training itself is right
    named = [f for f in rec.findings if f.message.startswith(f"{mod.EXPECTED_KEY} = ")]
    assert named, [f.message for f in rec.findings]
    assert all(f.expected != f.actual for f in named)


#: Loss-metric edge cases, in the default catalogue so a `compactsim run --backend` of any trainer reaches them: a
#: bug they alone expose (no +1e-8 in the normaliser, disable_ppo_ratio ignored, tis without a lower bound left
#: untruncated) would otherwise pass every other scenario.
EDGE_CASES = ("loss-metrics-all-rows-masked", "loss-metrics-disable-ppo-ratio", "loss-metrics-tis-upper-only",
              "loss-metrics-k1-mismatch")


def test_the_reference_backend_reports_every_loss_metric_right_in_the_edge_cases():
    records = [record_of(name) for name in EDGE_CASES]
    assert [(r.name, r.passed) for r in records] == [
        ("loss-metrics-all-rows-masked", True), ("loss-metrics-disable-ppo-ratio", True),
        ("loss-metrics-tis-upper-only", True), ("loss-metrics-k1-mismatch", True)], [f.message for r in records for f in r.findings]
    [empty] = records[0].step_metrics
    assert (empty["probs_ratio_min"], empty["probs_ratio_max"], empty["global_valid_toks"]) == (math.inf, -math.inf, 0.0)


def test_minus_one_for_a_step_without_trained_tokens_is_the_drivers_value_and_passes():
    """NeMo-RL's driver logs an extremum over no value as -1.0 (§3.7): for a step that trains no
    token at all, a backend reporting the driver's value passes; the same -1.0 from one empty
    micro-batch in a step that trains tokens is caught (`MISREPORTING`, kl-mask-sample-steps)."""
    rec = record_of("loss-metrics-all-rows-masked", "tests.quality.probs_ratio_empty_microbatch_minus_one:Backend")
    assert (tuple(rec.findings), rec.passed) == ((), True)
    [metrics] = rec.step_metrics
    assert (metrics["probs_ratio_min"], metrics["probs_ratio_clamped_max"]) == (-1.0, -1.0)


def test_legacy_media_without_the_request_input_cannot_train_silently():
    """Binning a contract-less rollout's images from the output alone drops its task image: the prompt then
    holds more image tokens than images, and the run ends in the pipeline's typed error, never in rows."""
    spec = "tests.quality.legacy_media_without_request_input:Backend"
    rec = record_of("legacy-task-image", spec)
    assert (rec.passed, rec.observed) == (False, "error:invalid_argument")
    [finding] = rec.findings
    assert finding.check == "verdict.unexpected_error" and "<|image|> tokens but" in finding.message


def test_an_optimizer_over_master_copies_is_named_unauditable_not_a_skipped_update():
    """It trains right, but the audit reads every update through the policy's own parameters: the finding says the
    optimizer holds none of them, where it used to say the update skipped 34 parameter tensors."""
    rec = record_of("warmup-weight-decay-no-clip", "tests.quality.master_weights_optimizer:Backend")
    counts = [f for f in rec.findings if f.check == "counts.optimizer"]
    assert counts and all(f.message.startswith("the optimizer's param groups hold none of the policy's parameters")
                          for f in counts)


#: Trainers that refuse a row they must train (a run that ends in the pipeline's typed error, never in rows): an
#: exclusive cap refuses the row that sits exactly at it; a cap checked on the padded width (rows of at most 300
#: tokens padded to a multiple of 64, 320) refuses rows that fit it. The cap is on each real row, inclusive.
WRONG_CAP = (("sequence_cap_exclusive", "sequence-at-the-cap"),
             ("sequence_cap_checked_on_padded_width", "sequence-cap-with-padding-multiple"))


@pytest.mark.parametrize(("module", "scenario"), WRONG_CAP)
def test_a_wrong_sequence_cap_refuses_a_row_it_must_train(module: str, scenario: str):
    rec = record_of(scenario, f"tests.quality.{module}:Backend")
    assert (rec.passed, rec.observed) == (False, "error:sequence_too_long")
    [finding] = rec.findings
    assert finding.check == "verdict.unexpected_error"


@pytest.mark.parametrize("module", CRASHING)
def test_failing_backend_is_a_finding_with_the_raising_frame(module: str):
    mod = importlib.import_module(f"tests.quality.{module}")
    spec = f"tests.quality.{module}:Backend"
    rec = record_of(mod.SCENARIO, spec)
    assert (rec.passed, rec.observed) == (False, "error:backend_error")
    [finding] = rec.findings
    assert (finding.check, finding.step) == ("backend.error", 0)
    assert " (at " in finding.message and ".py:" in finding.message
    assert finding.reproduce == f"compactsim run {mod.SCENARIO} --seed 0 --backend {spec}"


def test_a_wrong_return_is_blamed_on_the_method_that_returned_it():
    [finding] = record_of("no-compaction", "tests.quality.plan_returns_none:Backend").findings
    assert finding.message.startswith("the backend's plan raised: TypeError: plan returned NoneType, not a TracePlan")


def test_a_crashing_backend_does_not_stop_the_suite_and_the_outputs_are_written(tmp_path: Path):
    backend = "tests.quality.crashing_train_step:Backend"
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", "no-compaction", "text-only-rollout", "--backend", backend, "--out", str(out)])
    assert result.exit_code == 1, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert [(s["name"], s["observed"]) for s in summary["scenarios"]] == [
        ("no-compaction", "error:backend_error"), ("text-only-rollout", "error:backend_error")]
    assert (out / "report.html").is_file()
    assert "RuntimeError: CUDA error: an illegal memory access was encountered" in result.output


def test_never_updating_backend_is_named_at_every_step_with_the_tensor():
    from tests.quality import never_updates as mod

    rec = record_of(mod.SCENARIO, f"{mod.__name__}:Backend")
    updates = [f for f in rec.findings if f.check == "train.update"]
    assert [f.step for f in updates] == [0, 1, 2]
    assert all("the update was never applied" in f.message and f.row for f in updates)


def test_extra_optimizer_steps_are_measured_not_taken_from_the_backends_report():
    """One extra `optimizer.step()` per physical row beyond the first: the scenario trains 2 rows a step."""
    from tests.quality import extra_optimizer_steps as mod

    rec = record_of(mod.SCENARIO, f"{mod.__name__}:Backend")
    counts = [f for f in rec.findings if f.check == "counts.optimizer"]
    reported = [f for f in rec.findings if f.check == "counts.reported"]
    assert [(f.step, f.expected, f.actual) for f in counts] == [(0, 1, 2), (1, 1, 2), (2, 1, 2)]
    assert [(f.step, f.expected, f.actual) for f in reported] == [(0, 2, 1.0), (1, 2, 1.0), (2, 2, 1.0)]


def test_a_gradient_scale_a_float32_update_hides_is_measured_from_the_optimizer_state():
    """Adam divides the gradient's scale out of the update, so only the gradient read back from AdamW's
    first moment (and the reported norm) can show a 1/4 accumulation factor; the update check stays silent."""
    rec = record_of("float32-training", "tests.quality.gradient_accumulation_mean:Backend")
    assert sorted({f.check for f in rec.findings}) == ["train.grad_norm", "train.gradient"]
    measured = [f for f in rec.findings if f.check == "train.gradient"]
    assert [f.step for f in measured] == [0, 1]
    assert all("the applied gradient is 0.25x the expected one" in f.message for f in measured)


def test_broadcast_first_advantage_names_the_other_rollouts_first_trainable_token():
    rec = record_of("image-compaction-k2-rolling", "tests.quality.broadcast_first_advantage:Backend")
    first = next(f for f in rec.findings if f.check == "row.advantage")
    assert (first.step, first.row, first.expected, first.actual) == (0, "s0-g0-r1/trace-0", -1.0, 1.0)
    assert first.position is not None and first.position > 0


def test_dropped_sentinel_is_reported_at_the_last_token_of_each_non_final_trace():
    rec = record_of("image-compaction-k2-rolling", "tests.quality.drop_boundary_sentinel:Backend")
    assert [(f.check, f.row) for f in rec.findings] == [
        ("row.sentinel", "s0-g0-r0/trace-0"), ("row.sentinel", "s0-g0-r0/trace-1"),
        ("row.sentinel", "s0-g0-r1/trace-0"), ("row.sentinel", "s0-g0-r1/trace-1"),
    ]
    assert all(f.expected == -1 and f.actual == [[0, 1], [0, 1]] for f in rec.findings)


def test_own_only_new_images_reports_the_missing_image_history():
    rec = record_of("image-compaction-k2-rolling", "tests.quality.own_only_new_images:Backend")
    media = [f for f in rec.findings if f.check == "row.media"]
    assert [f.row for f in media] == ["s0-g0-r0/trace-1", "s0-g0-r0/trace-2", "s0-g0-r1/trace-1", "s0-g0-r1/trace-2"]
    f = media[0]
    assert len(f.expected) == 2 and len(f.actual) == 1 and f.actual[0] == f.expected[1]


def test_compactsim_run_fails_on_a_broken_backend_with_the_right_finding(tmp_path: Path):
    backend = "tests.quality.broadcast_first_advantage:Backend"
    result = CliRunner().invoke(app, ["run", "explicit-logprobs", "--backend", backend, "--out", str(tmp_path / "out")])
    assert result.exit_code == 1, result.output
    assert "FAIL explicit-logprobs: expected success, observed success" in result.output
    assert "[row.advantage] explicit-logprobs step 0 row s0-g0-r1/trace-0 token" in result.output
    assert f"reproduce: compactsim run explicit-logprobs --seed 0 --backend {backend}" in result.output
    assert "0/1 scenarios met their expected verdict" in result.output


def test_optimizer_state_drift_is_caught_at_the_step_where_it_drifts():
    """The oracle carries its own AdamW moments: lost moments change nothing at step 0 and everything after."""
    from tests.quality import moments_reset as mod

    rec = record_of(mod.SCENARIO, f"{mod.__name__}:Backend")
    assert sorted({f.step for f in rec.findings}) == [1, 2]
    assert {f.check for f in rec.findings} == {"train.update", "train.continuity"}
    # the moments disagree on one gradient: named as a reset, not as a wrong gradient
    assert all("do not agree on one gradient" in f.message for f in rec.findings if f.check == "train.continuity")


def test_a_policy_wrapped_ddp_style_is_measured_through_the_wrapper_and_passes():
    """Parameter names gain ``module.``; the harness reads the model inside, so a correct trainer stays correct."""
    from tests.quality import wrapped_policy

    rec = record_of(wrapped_policy.SCENARIO, "tests.quality.wrapped_policy:Backend")
    assert (rec.passed, rec.observed, rec.steps) == (True, "success", 3), [f.message for f in rec.findings]


def test_stale_weights_are_named_at_every_step_after_the_first():
    from tests.quality import stale_weights_reloaded as mod

    rec = record_of(mod.SCENARIO, f"{mod.__name__}:Backend")
    assert sorted({(f.check, f.step) for f in rec.findings}) == [("train.continuity", 1), ("train.continuity", 2)]
    assert all("parameter tensor(s) changed" in f.message for f in rec.findings)
