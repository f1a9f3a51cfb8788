"""One seam through which sync and async training steps report batch and training metrics.

NeMo-RL's sync and async loops drifted apart metric by metric; here both call `step_metrics`,
which takes the batch's own metrics (`TraceBatch.metrics()`) and the trainer's, and refuses a
trainer metric that would silently overwrite a batch metric.
"""

from __future__ import annotations

from collections.abc import Mapping

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.core.metrics import BATCH_METRIC_KEYS


def batch_metrics(batch: TraceBatch) -> dict[str, float | int]:
    """The batch metrics every caller logs (keys: `compactsim.harness.core.metrics.BATCH_METRIC_KEYS`)."""
    values = batch.metrics()
    missing = [k for k in BATCH_METRIC_KEYS if k not in values]
    if missing:
        raise ValueError(f"TraceBatch.metrics() lacks {missing}")
    return values


def step_metrics(batch: TraceBatch, train_metrics: Mapping[str, float | int]) -> dict[str, float | int]:
    """Batch metrics plus the trainer's; a key reported by both is a bug, not an override."""
    values = batch_metrics(batch)
    clash = sorted(set(values) & set(train_metrics))
    if clash:
        raise ValueError(f"trainer metrics {clash} would overwrite batch metrics computed from the rows")
    values.update(train_metrics)
    return values


__all__ = ["batch_metrics", "step_metrics"]
