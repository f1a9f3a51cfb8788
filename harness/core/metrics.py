"""Metric keys, declared once and shared by the pipeline, the oracle and the report.

Keys under `physical_trace_training/` describe how logical rollouts became physical rows;
`advantages/*`, `num_mask_sample_filtered` and `total_num_tokens` keep NeMo-RL's names and
meanings so a compacted run and an uncompacted run log the same quantities under the same keys.
"""

from __future__ import annotations

PHYSICAL_PREFIX = "physical_trace_training/"

#: Real (non-padding) rows: one per physical trace.
NUM_PHYSICAL_ROWS = "physical_trace_training/num_physical_rows"
#: Rows appended after all real rows so the row count is divisible by dp_size × micro_batch_size.
NUM_PADDING_ROWS = "physical_trace_training/num_padding_rows"
#: Logical rollouts in the batch.
NUM_LOGICAL_ROLLOUTS = "physical_trace_training/num_logical_rollouts"
#: Logical rollouts that became more than one row.
NUM_SPLIT_ROLLOUTS = "physical_trace_training/num_split_rollouts"
#: The largest number of rows any one logical rollout produced.
ROWS_PER_ROLLOUT_MAX = "physical_trace_training/rows_per_rollout_max"
#: Mean and sum of the logical (one value per rollout) GRPO advantages.
LOGICAL_ADVANTAGES_MEAN = "physical_trace_training/logical_advantages/mean"
LOGICAL_ADVANTAGES_SUM = "physical_trace_training/logical_advantages/sum"
#: The increment a sample-counting LR scheduler (Megatron's) receives for this step: the number of
#: logical rollouts, never the row count (the reference PR's meaning of this key).
SCHEDULER_STEP_INCREMENT = "physical_trace_training/scheduler_step_increment"
#: Optimizer updates this step made (must be 1 per logical batch), counted from the optimizer's own
#: state — by the trainer in its metrics, and again by the harness, which replaces the reported value
#: with what it measured (never a constant).
OPTIMIZER_STEPS = "physical_trace_training/optimizer_steps"
#: LR-scheduler increments this step made (must be 1 for a step-counting scheduler), counted from the
#: scheduler's own `last_epoch`; measured by the harness like `OPTIMIZER_STEPS`.
SCHEDULER_INCREMENTS = "train/scheduler_increments"
#: The per-step counts above: reported by the trainer, measured by the harness.
STEP_COUNT_KEYS: tuple[str, ...] = (OPTIMIZER_STEPS, SCHEDULER_INCREMENTS)

# The reference PR's own `physical_trace_training/*` batch keys, with its meanings, so dashboards carry
# over (`shared/reference/pr-physical-trace-training.md`, facts read from the PR's code).
#: Logical rollouts in the batch (same value as `NUM_LOGICAL_ROLLOUTS`).
PR_LOGICAL_ROLLOUTS = "physical_trace_training/logical_rollouts"
#: Physical traces, i.e. real rows (same value as `NUM_PHYSICAL_ROWS`).
PR_PHYSICAL_TRACES = "physical_trace_training/physical_traces"
#: Padding rows (same value as `NUM_PADDING_ROWS`).
PR_PADDING_ROWS = "physical_trace_training/padding_rows"
#: All rows handed to the trainer: physical traces + padding rows (unlike `NUM_PHYSICAL_ROWS`).
PR_PHYSICAL_ROWS = "physical_trace_training/physical_rows"
#: Trainable (sampled) tokens over the real rows: Σ token_mask.
PR_ELIGIBLE_ACTION_TOKENS = "physical_trace_training/eligible_action_tokens"
#: Physical traces that start at a boundary the evidence declared.
PR_DECLARED_BOUNDARIES = "physical_trace_training/declared_boundaries"
#: Physical traces that start at a discontinuity inferred from the tokens (non-strict planning only).
PR_INFERRED_DISCONTINUITIES = "physical_trace_training/inferred_discontinuities"

#: NeMo-RL's advantage statistics (nemo-rl-semantics §3.7): `advantages/sum` sums the *unmasked*
#: advantages tensor, every position of every row broadcast, = S_pad · Σ_rows Â_parent(row) (padding
#: rows hold 0), logged before `advantage_clip_low/high` apply (Â: the unclipped advantage); `mean`,
#: `min`, `max` are over positions where token_mask == 1, after clipping.
ADVANTAGES_SUM = "advantages/sum"
ADVANTAGES_MEAN = "advantages/mean"
ADVANTAGES_MIN = "advantages/min"
ADVANTAGES_MAX = "advantages/max"
#: Logical rollouts flagged `mask_sample` (truncation and zero loss multipliers do not count).
NUM_MASK_SAMPLE_FILTERED = "num_mask_sample_filtered"
#: Sum of real rows' unpadded lengths (prompts included; padding rows never count).
TOTAL_NUM_TOKENS = "total_num_tokens"
#: NeMo-RL's driver metric of the step's rewards (`np.mean`, nemo-rl-semantics §3.7): the mean over the batch's
#: samples, which under physical-trace training are the logical rollouts (the PR counts by logical rollout). Not
#: reported by the reference backend; audited when a backend reports it (`audit.checks.check_reported_reward`).
REWARD = "reward"

#: Every key `TraceBatch.metrics()` returns, in a stable order (the counts are not batch properties).
BATCH_METRIC_KEYS: tuple[str, ...] = (
    NUM_PHYSICAL_ROWS,
    NUM_PADDING_ROWS,
    NUM_LOGICAL_ROLLOUTS,
    NUM_SPLIT_ROLLOUTS,
    ROWS_PER_ROLLOUT_MAX,
    LOGICAL_ADVANTAGES_MEAN,
    LOGICAL_ADVANTAGES_SUM,
    SCHEDULER_STEP_INCREMENT,
    PR_LOGICAL_ROLLOUTS,
    PR_PHYSICAL_TRACES,
    PR_PADDING_ROWS,
    PR_PHYSICAL_ROWS,
    PR_ELIGIBLE_ACTION_TOKENS,
    PR_DECLARED_BOUNDARIES,
    PR_INFERRED_DISCONTINUITIES,
    ADVANTAGES_SUM,
    ADVANTAGES_MEAN,
    ADVANTAGES_MIN,
    ADVANTAGES_MAX,
    NUM_MASK_SAMPLE_FILTERED,
    TOTAL_NUM_TOKENS,
)

# ------------------------------------------------------------------------------ trainer step
# Loss metrics keep NeMo-RL's names (see `compactsim.harness.pipeline.loss.METRIC_KEYS`); these are the keys
# the GRPO step adds, plus the loss keys the audit checks most.

#: Masked mean of exp(|generation − trainer logprob|) over trained tokens; ≈ 1 when both sides agree.
TOKEN_MULT_PROB_ERROR = "token_mult_prob_error"
#: Total gradient norm after the dp all-reduce, before clipping.
GRAD_NORM = "grad_norm"
#: Learning rate the optimizer step used.
LR = "lr"
#: Global normalisers of the logical batch (NeMo-RL's names).
GLOBAL_VALID_TOKENS = "global_valid_toks"
GLOBAL_VALID_SEQS = "global_valid_seqs"
#: Policy version whose weights computed this step's logprobs and gradient.
TRAINED_POLICY_VERSION = "train/policy_version"
#: Optimizer steps and LR-scheduler increments taken so far, counted by the trainer itself.
OPTIMIZER_STEP_COUNT = "train/optimizer_step_count"
SCHEDULER_STEP_COUNT = "train/scheduler_step_count"
#: Async GRPO: age (trained version − generation version) of the sampled groups, and groups
#: evicted as older than `max_trajectory_age_steps`.
ASYNC_TRAJECTORY_AGE_MEAN = "async/trajectory_age_mean"
ASYNC_TRAJECTORY_AGE_MAX = "async/trajectory_age_max"
ASYNC_NUM_EVICTED_GROUPS = "async/num_evicted_groups"
#: Wall-clock shares of one step (seconds). Never part of an artifact or its digest.
TIMING_GENERATION = "timing/generation_s"
TIMING_MATERIALIZE = "timing/materialize_s"
TIMING_TRAIN = "timing/train_s"
TIMING_WEIGHT_PUSH = "timing/weight_push_s"
TIMING_STEP = "timing/step_s"
TIMING_PREFIX = "timing/"

__all__ = [
    "ADVANTAGES_MAX",
    "ADVANTAGES_MEAN",
    "ADVANTAGES_MIN",
    "ADVANTAGES_SUM",
    "ASYNC_NUM_EVICTED_GROUPS",
    "ASYNC_TRAJECTORY_AGE_MAX",
    "ASYNC_TRAJECTORY_AGE_MEAN",
    "BATCH_METRIC_KEYS",
    "GLOBAL_VALID_SEQS",
    "GLOBAL_VALID_TOKENS",
    "GRAD_NORM",
    "LOGICAL_ADVANTAGES_MEAN",
    "LOGICAL_ADVANTAGES_SUM",
    "LR",
    "NUM_LOGICAL_ROLLOUTS",
    "NUM_MASK_SAMPLE_FILTERED",
    "NUM_PADDING_ROWS",
    "NUM_PHYSICAL_ROWS",
    "NUM_SPLIT_ROLLOUTS",
    "OPTIMIZER_STEPS",
    "OPTIMIZER_STEP_COUNT",
    "PHYSICAL_PREFIX",
    "PR_DECLARED_BOUNDARIES",
    "PR_ELIGIBLE_ACTION_TOKENS",
    "PR_INFERRED_DISCONTINUITIES",
    "PR_LOGICAL_ROLLOUTS",
    "PR_PADDING_ROWS",
    "PR_PHYSICAL_ROWS",
    "PR_PHYSICAL_TRACES",
    "REWARD",
    "ROWS_PER_ROLLOUT_MAX",
    "SCHEDULER_INCREMENTS",
    "SCHEDULER_STEP_COUNT",
    "SCHEDULER_STEP_INCREMENT",
    "STEP_COUNT_KEYS",
    "TIMING_GENERATION",
    "TIMING_MATERIALIZE",
    "TIMING_PREFIX",
    "TIMING_STEP",
    "TIMING_TRAIN",
    "TIMING_WEIGHT_PUSH",
    "TOKEN_MULT_PROB_ERROR",
    "TOTAL_NUM_TOKENS",
    "TRAINED_POLICY_VERSION",
]
