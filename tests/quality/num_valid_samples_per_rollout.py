"""Broken backend (misreporting): ``num_valid_samples`` and ``global_valid_seqs`` count *logical rollouts* whose
sample mask is on — the trainer "counts by logical rollout", as the PR counts its optimizer steps and scheduler
increments — instead of the rows the loss normalises over.

NeMo-RL's ``num_valid_samples`` is ``Σ sample_mask`` over the rows the loss saw and ``global_valid_seqs`` the same
sum all-reduced over the global batch (nemo-rl-semantics §4.6: "`num_valid_samples` = `Σ sample_mask`, the local
count"; ``N_seq = all_reduce_DP Σ sample_mask``), the normaliser of the sequence-level quantities: under compaction a
rollout of k rows counts k times. The training itself is the reference's.
"""

from __future__ import annotations

from compactsim.harness.core import metrics as M
from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality._patching import with_metrics

EXPECTED_CHECK = "train.metric"
SCENARIO = "summary-compaction"  # each rollout trains as two rows


class Backend(ReferenceBackend):
    name = "num-valid-samples-per-rollout"

    def train_step(self, state, batch, cfg):
        result = super().train_step(state, batch, cfg)
        rollouts = float(sum(1 for r in batch.logical if not r.mask_sample))
        return with_metrics(result, {"num_valid_samples": rollouts, M.GLOBAL_VALID_SEQS: rollouts})
