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
#: LR-scheduler increments per optimizer step: always 1, whatever the row count.
SCHEDULER_STEP_INCREMENT = "physical_trace_training/scheduler_step_increment"
#: Optimizer steps this batch makes: one per logical batch.
OPTIMIZER_STEPS = "physical_trace_training/optimizer_steps"

#: Token-level advantage statistics over the materialised rows (masked by token_mask).
ADVANTAGES_SUM = "advantages/sum"
ADVANTAGES_MEAN = "advantages/mean"
ADVANTAGES_MIN = "advantages/min"
ADVANTAGES_MAX = "advantages/max"
#: Logical rollouts flagged `mask_sample` (truncation and zero loss multipliers do not count).
NUM_MASK_SAMPLE_FILTERED = "num_mask_sample_filtered"
#: Sum of real rows' unpadded lengths (prompts included; padding rows never count).
TOTAL_NUM_TOKENS = "total_num_tokens"

#: Every key `TraceBatch.metrics()` returns, in a stable order.
BATCH_METRIC_KEYS: tuple[str, ...] = (
    NUM_PHYSICAL_ROWS,
    NUM_PADDING_ROWS,
    NUM_LOGICAL_ROLLOUTS,
    NUM_SPLIT_ROLLOUTS,
    ROWS_PER_ROLLOUT_MAX,
    LOGICAL_ADVANTAGES_MEAN,
    LOGICAL_ADVANTAGES_SUM,
    SCHEDULER_STEP_INCREMENT,
    OPTIMIZER_STEPS,
    ADVANTAGES_SUM,
    ADVANTAGES_MEAN,
    ADVANTAGES_MIN,
    ADVANTAGES_MAX,
    NUM_MASK_SAMPLE_FILTERED,
    TOTAL_NUM_TOKENS,
)

__all__ = [
    "ADVANTAGES_MAX",
    "ADVANTAGES_MEAN",
    "ADVANTAGES_MIN",
    "ADVANTAGES_SUM",
    "BATCH_METRIC_KEYS",
    "LOGICAL_ADVANTAGES_MEAN",
    "LOGICAL_ADVANTAGES_SUM",
    "NUM_LOGICAL_ROLLOUTS",
    "NUM_MASK_SAMPLE_FILTERED",
    "NUM_PADDING_ROWS",
    "NUM_PHYSICAL_ROWS",
    "NUM_SPLIT_ROLLOUTS",
    "OPTIMIZER_STEPS",
    "PHYSICAL_PREFIX",
    "ROWS_PER_ROLLOUT_MAX",
    "SCHEDULER_STEP_INCREMENT",
    "TOTAL_NUM_TOKENS",
]
