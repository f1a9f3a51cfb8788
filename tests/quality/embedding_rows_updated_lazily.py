"""Broken backend: a row-sparse ("lazy") Adam on the token embedding: rows of tokens absent from the batch keep their
weights, while AdamW's moments, counters and every other parameter are stepped as torch steps them.

Those rows have a zero gradient, so Adam would still move them by the momentum of earlier steps (and
by decay, which this scenario does not use); the gradient and both moments are right. The update check
allowed an entry whose gradient is under its tolerance up to 2·lr (its sign could flip in a lower
precision), which hid the frozen rows; now the optimizer's own moments settle the step of every entry
no gradient reached (`training_checks._settled_entries`): `train.update` from step 1 on, naming
`tok_emb.weight` (step 0 has no momentum yet, so the rows rightly stay).
"""

from __future__ import annotations

import functools

import torch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "train.update"
SCENARIO = "kl-zero-advantage-steps"  # two policy steps, no weight decay


def lazy_embedding_step(step, embedding: torch.nn.Parameter) -> None:  # noqa: ANN001 - the optimizer's bound step
    """Step the optimizer, then put back the embedding rows the gradient did not reach."""
    untouched = (embedding.grad == 0).all(dim=1) if embedding.grad is not None else torch.ones(
        embedding.shape[0], dtype=torch.bool)
    kept = embedding.detach()[untouched].clone()
    step()
    with torch.no_grad():
        embedding[untouched] = kept


class Backend(ReferenceBackend):
    """The reference step with the optimizer's `step` wrapped by `lazy_embedding_step` (set on the instance, around
    the LR scheduler's own wrapper, so the scheduler still sees the step)."""

    name = "embedding-rows-updated-lazily"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        if not isinstance(state.optimizer.step, functools.partial):
            state.optimizer.step = functools.partial(lazy_embedding_step, state.optimizer.step, state.policy.tok_emb.weight)
        return super().train_step(state, batch, cfg)
