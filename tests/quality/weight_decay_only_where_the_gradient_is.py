"""Broken backend: decoupled weight decay applied only to the embedding rows the gradient touched, as AdamW
implementations for sparse (IndexedSlices) embedding gradients do: rows of tokens absent from the batch are
never decayed. The Adam step itself, the moments and every other parameter are right.

A skipped decay of lr·λ·|w| on a row whose gradient is zero fitted inside the 2·lr the update check
allowed entries with a gradient under its tolerance; such entries are now settled by the optimizer's
own moments (`training_checks._settled_entries`): `train.update` at every step, naming `tok_emb.weight`.
"""

from __future__ import annotations

import functools

import torch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "train.update"
SCENARIO = "warmup-weight-decay-no-clip"


def sparse_decay_step(step, optimizer: torch.optim.Optimizer, embedding: torch.nn.Parameter) -> None:  # noqa: ANN001
    """Step the optimizer, then give back the decay of the embedding rows the gradient did not reach."""
    untouched = (embedding.grad == 0).all(dim=1) if embedding.grad is not None else torch.ones(
        embedding.shape[0], dtype=torch.bool)
    group = next(g for g in optimizer.param_groups if any(p is embedding for p in g["params"]))
    kept_decay = group["lr"] * group["weight_decay"] * embedding.detach()[untouched].clone()
    step()
    with torch.no_grad():
        embedding[untouched] += kept_decay


class Backend(ReferenceBackend):
    """The reference step with the optimizer's `step` wrapped by `sparse_decay_step` (on the instance, around the
    LR scheduler's own wrapper)."""

    name = "weight-decay-only-where-the-gradient-is"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        if not isinstance(state.optimizer.step, functools.partial):
            state.optimizer.step = functools.partial(sparse_decay_step, state.optimizer.step, state.optimizer,
                                                     state.policy.tok_emb.weight)
        return super().train_step(state, batch, cfg)
