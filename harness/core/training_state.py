"""What the harness measures of the training state it owns, before and after a backend's step.

The harness builds the weights, optimizer and scheduler it hands a backend, so it can read them
itself instead of trusting the backend's account of the step (DESIGN §6a): a float64 copy of
every parameter, the learning rate the optimizer will use, the optimizer's own per-parameter step
counters and the scheduler's ``last_epoch``. The difference between two snapshots is what one
``train_step`` really did. Reading is duck-typed (``policy`` with ``named_parameters`` and
``config``, a torch optimizer, a torch LR scheduler), so no pipeline type is imported here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(frozen=True, slots=True, eq=False)
class TrainingSnapshot:
    """The training state at one instant, as plain tensors and numbers."""

    #: Parameter name → float64 CPU copy.
    weights: Mapping[str, torch.Tensor] = field(repr=False)
    #: The policy's shape (`compactsim.harness.core.policy.PolicyConfig`), so the same model can be rebuilt.
    model_config: Any
    #: Learning rate of every optimizer parameter group (what the next `optimizer.step()` uses).
    lrs: tuple[float, ...]
    #: The optimizer's own update counters: smallest and largest per-parameter ``step`` (0 before any).
    optimizer_step_min: int
    optimizer_step_max: int
    #: ``scheduler.last_epoch``: LR-scheduler increments so far.
    scheduler_epoch: int


def _step_count(state: Mapping[str, Any]) -> int:
    value = state.get("step", 0)
    return int(value.item()) if isinstance(value, torch.Tensor) else int(value)


def _unwrapped(policy: Any) -> Any:
    """The model inside DDP/FSDP-style wrappers (``.module``), whose parameter names carry a ``module.`` prefix.

    A trainer may wrap the policy it was handed; the weights are still the policy's own and are
    named and rebuilt as the policy names them.
    """
    for _ in range(8):  # wrappers nest (FSDP around DDP); a cycle cannot loop forever
        inner = getattr(policy, "module", None)
        names = [name for name, _ in policy.named_parameters()]
        if inner is None or not hasattr(inner, "named_parameters") or not names \
                or not all(name.startswith("module.") for name in names):
            return policy
        policy = inner
    return policy


def snapshot_training_state(policy: Any, optimizer: Any, scheduler: Any) -> TrainingSnapshot:
    """Read the weights, learning rates and counters of a live training state (copies; nothing is changed)."""
    policy = _unwrapped(policy)
    weights = {name: p.detach().to(device="cpu", dtype=torch.float64).clone() for name, p in policy.named_parameters()}
    steps = [_step_count(optimizer.state.get(p, {})) for group in optimizer.param_groups for p in group["params"]]
    return TrainingSnapshot(
        weights=weights,
        model_config=getattr(policy, "config", None),
        lrs=tuple(float(group["lr"]) for group in optimizer.param_groups),
        optimizer_step_min=min(steps, default=0),
        optimizer_step_max=max(steps, default=0),
        scheduler_epoch=int(scheduler.last_epoch),
    )


@dataclass(frozen=True, slots=True, eq=False)
class MeasuredStep:
    """What one backend step did to the training state, measured by the harness (never reported by it)."""

    before: TrainingSnapshot
    after: TrainingSnapshot

    @property
    def optimizer_steps(self) -> int:
        """Optimizer updates the step took: the largest per-parameter counter increase."""
        return self.after.optimizer_step_max - self.before.optimizer_step_max

    @property
    def optimizer_steps_uneven(self) -> bool:
        """Some parameters were updated more often than others (an update that skipped parameters)."""
        return (self.after.optimizer_step_max - self.before.optimizer_step_max
                != self.after.optimizer_step_min - self.before.optimizer_step_min)

    @property
    def scheduler_increments(self) -> int:
        return self.after.scheduler_epoch - self.before.scheduler_epoch

    @property
    def lr(self) -> float:
        """The learning rate the step's update used (read before it)."""
        return self.before.lrs[0] if self.before.lrs else float("nan")


__all__ = ["MeasuredStep", "TrainingSnapshot", "snapshot_training_state"]
