"""Broken backend: the sample-counting scheduler is told the number of physical traces, not logical rollouts.

The PR's `physical_trace_training/scheduler_step_increment` is what a sample-counting (Megatron-style,
`scheduler.step(increment=gbs)`) scheduler receives: the logical rollout count, never the row count
(nemo-rl-semantics §3.7). This trainer's LambdaLR still steps once, but it logs (and would hand a
sample-counting scheduler) the row count.
"""

from __future__ import annotations

from compactsim.harness.core import metrics as M
from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._patching import with_metrics

EXPECTED_CHECK = "metric.exact"
SCENARIO = "summary-compaction"  # two rollouts split into four traces


class Backend(ReferenceBackend):
    name = "scheduler-increment-counts-traces"

    def train_step(self, state, batch, cfg):
        result = super().train_step(state, batch, cfg)
        return with_metrics(result, {M.SCHEDULER_STEP_INCREMENT: int((batch.parent_indices >= 0).sum())})
