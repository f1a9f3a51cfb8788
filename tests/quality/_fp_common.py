"""Plumbing shared by the false-positive-hunt backends (tests/quality/fp_*.py): what every `train_step` must hand back.

Only what the README names as the backend's job around the step itself: read the optimizer's own update counter,
step the optimizer and the scheduler exactly once, advance the version counters, and package the metrics and the
step artifact (`step_metrics`, `artifact_from_batch`). Each fp_* backend computes its loss, gradient, clipping and
metrics in its own way; none of them calls compactsim's loss or trainer helpers (apart from `check_batch`).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from compactsim.harness.core import metrics as M
from compactsim.harness.core.artifacts import artifact_from_batch
from compactsim.harness.pipeline.batch_metrics import step_metrics
from compactsim.harness.pipeline.trainer import StepResult

#: NeMo-RL's masked_mean epsilon (loss/utils.py:212-224).
EPS = 1e-8


def update_counter(optimizer: torch.optim.Optimizer) -> int:
    """The largest per-parameter `step` the optimizer holds (torch keeps it per parameter)."""
    vals = [s.get("step", 0) for s in optimizer.state.values()]
    return max((int(v.item()) if isinstance(v, torch.Tensor) else int(v) for v in vals), default=0)


def scheduler_count(scheduler) -> int:
    """How many times the scheduler stepped: `last_epoch`, or its first member's for a `ChainedScheduler` (which has
    none; every member steps once per `step()`)."""
    if hasattr(scheduler, "last_epoch"):
        return int(scheduler.last_epoch)
    return int(scheduler._schedulers[0].last_epoch)


def step_once(state) -> tuple[int, int]:
    """Exactly one optimizer step, then one scheduler step; (updates, increments) as measured from the objects."""
    before, epoch = update_counter(state.optimizer), scheduler_count(state.scheduler)
    state.optimizer.step()
    state.scheduler.step()
    state.optimizer_steps += 1
    state.version += 1
    return update_counter(state.optimizer) - before, scheduler_count(state.scheduler) - epoch


def finish(state, batch, *, step: int, trained_version: int, train_metrics: Mapping[str, float | int],
           prev: torch.Tensor, ref: torch.Tensor | None, routes_used: torch.Tensor | None,
           updates: int, increments: int) -> StepResult:
    """The StepResult and artifact of one step. `prev`/`ref` are (R, S) own-position logprobs (any dtype/device)."""
    metrics = dict(train_metrics)
    metrics.update({
        M.TRAINED_POLICY_VERSION: trained_version,
        M.OPTIMIZER_STEPS: updates,
        M.SCHEDULER_INCREMENTS: increments,
        M.OPTIMIZER_STEP_COUNT: state.optimizer_steps,
        M.SCHEDULER_STEP_COUNT: scheduler_count(state.scheduler),
    })
    metrics = step_metrics(batch, metrics)
    prev_host = prev.detach().to("cpu", state.dtype)
    ref_host = None if ref is None else ref.detach().to("cpu", state.dtype)
    artifact = artifact_from_batch(batch, step=step, trained_policy_version=trained_version, prev_logprobs=prev_host,
                                   reference_logprobs=ref_host,
                                   routes_used=None if routes_used is None else routes_used.detach().cpu(),
                                   metrics=metrics, optimizer_steps=updates, scheduler_increments=increments)
    return StepResult(step=step, batch=batch, metrics=metrics, artifact=artifact, prev_logprobs=prev_host,
                      trained_version=trained_version, new_version=state.version)


def row_images(batch, dtype: torch.dtype, device) -> list[list[torch.Tensor]]:
    """Each row's images cast straight from the batch's exact float64 k/255 pixels to the compute dtype."""
    cache: dict[int, torch.Tensor] = {}
    return [[cache.setdefault(id(px), px.to(device=device, dtype=dtype)) for px in row] for row in batch.row_pixel_values]
