"""Broken backend: `policy.max_total_sequence_length` is judged on each rollout's last row (its "full context"),
so an earlier trace over the cap trains instead of being refused.

Without compaction a rollout's one row is its last, and every catalogue cap scenario's longest row was a final one;
in `sequence-too-long-in-an-earlier-trace` the summary makes the last trace the shortest.
"""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "verdict.expected_error"
SCENARIO = "sequence-too-long-in-an-earlier-trace"


class Backend(ReferenceBackend):
    name = "sequence-cap-on-last-rows-only"

    def train_step(self, state, batch, cfg):
        cap = cfg.policy.max_total_sequence_length
        last_rows = [record.row_indices[-1] for record in batch.logical if record.row_indices]
        if cap is not None and all(int(batch.row_input_lengths[r]) <= cap for r in last_rows):
            policy = cfg.policy.model_copy(update={"max_total_sequence_length": 10**9})  # the earlier rows go unjudged
            cfg = cfg.model_copy(update={"policy": policy})
        return super().train_step(state, batch, cfg)
