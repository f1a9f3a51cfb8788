"""What a trainer actually did, as plain data the audit compares: rows, logical records, metrics, errors.

The audit never reads a backend's objects: a step's `StepArtifact` (or an external trainer's
rows dump) is turned into an `ObservedStep` first. Arrays are numpy, one per row, padded to the
batch's sequence length exactly as the trainer had them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from compactsim.harness.core.artifacts import StepArtifact, pixel_digest
from compactsim.harness.core.digests import bytes_digest
from compactsim.harness.core.training_state import MeasuredStep


@dataclass(frozen=True, slots=True, eq=False)
class ObservedRow:
    """One row of a trained batch (real or padding), at its position in the batch."""

    row_index: int
    physical_trace_id: str | None
    logical_rollout_id: str | None
    #: parent_indices[row]: index into the step's `logical`; -1 for padding.
    parent_index: int
    trace_index: int
    #: (S,) token ids, padded; `length` of them are real.
    input_ids: np.ndarray
    length: int
    #: (S,) 1.0 on trained positions.
    token_mask: np.ndarray
    #: (S,) behaviour logprob at each position.
    generation_logprobs: np.ndarray
    #: (S,) per-token advantage.
    advantages: np.ndarray
    sample_mask: float
    media_ids: tuple[str, ...] = ()
    pixel_digests: tuple[str, ...] = ()
    #: Positions the trainer declares as boundary sentinels (used when `routes` is None).
    declared_sentinel_positions: tuple[int, ...] = ()
    #: (S, L, K) replayed routes (without router replay: the routes the batch materialized), or None.
    routes: np.ndarray | None = field(default=None, repr=False)
    generation_policy_version: int = -1

    @property
    def is_padding(self) -> bool:
        return self.parent_index < 0


@dataclass(frozen=True, slots=True)
class ObservedLogical:
    """One logical rollout of a step, at its `parent_indices` index."""

    index: int
    rollout_id: str
    advantage: float
    reward: float | None = None
    mask_sample: bool = False


@dataclass(frozen=True, slots=True, eq=False)
class ObservedStep:
    """One optimizer step: the batch as trained, its logical records and its reported metrics."""

    step: int
    rows: tuple[ObservedRow, ...]
    logical: tuple[ObservedLogical, ...]
    metrics: Mapping[str, float | int]
    dp_size: int = 1
    micro_batch_size: int = 1
    #: Counts as the trainer's artifact or rows dump reports them (what an external trainer can tell us).
    optimizer_steps: int = 1
    scheduler_increments: int = 1
    #: What the harness measured of the training state it owns (None for an external trainer's dump).
    measured: MeasuredStep | None = field(default=None, repr=False)
    #: The count metrics the backend reported before the harness replaced them with measured values.
    reported_counts: Mapping[str, float | int] = field(default_factory=dict)


#: `ObservedError.code` of a backend that raised something untyped or returned a malformed result.
BACKEND_ERROR = "backend_error"


@dataclass(frozen=True, slots=True)
class ObservedError:
    """The error that stopped a run (a contract or config error raised by the backend)."""

    code: str
    rollout_id: str | None
    turn_id: int | None
    #: Step during which it was raised, and the stage (plan, materialize, train, collect, ...).
    step: int | None
    stage: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code, "rollout_id": self.rollout_id, "turn_id": self.turn_id,
            "step": self.step, "stage": self.stage, "message": self.message,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ObservedError:
        return cls(code=data["code"], rollout_id=data.get("rollout_id"), turn_id=data.get("turn_id"),
                   step=data.get("step"), stage=data.get("stage", ""), message=data.get("message", ""))


@dataclass(frozen=True, slots=True, eq=False)
class ObservedRun:
    """Everything a scenario run produced that the audit reads."""

    steps: tuple[ObservedStep, ...]
    error: ObservedError | None = None


def rgb_pixel_digest(pixels: Any) -> str:
    """sha256 of an image's RGB uint8 pixels in H×W×3 row-major order (the oracle's `pixel_digests`).

    `pixels` is a (3, H, W) float tensor/array in [0, 1] (what a batch carries) or an
    (H, W, 3) uint8 array (a decoded image); both give the same digest for the same image.
    Float pixels go through `compactsim.harness.core.artifacts.pixel_digest` (what step artifacts record), so
    the audit and the artifacts share one formula; the oracle keeps its own.
    """
    if hasattr(pixels, "detach"):
        arr = pixels
    else:
        arr = np.asarray(pixels)
        if arr.dtype == np.uint8:
            if arr.ndim != 3 or arr.shape[2] != 3:
                raise ValueError(f"uint8 pixels must be (H, W, 3); got shape {arr.shape}")
            return bytes_digest(np.ascontiguousarray(arr).tobytes())
    if arr.ndim != 3 or arr.shape[0] != 3:
        raise ValueError(f"float pixels must be (3, H, W); got shape {tuple(arr.shape)}")
    return pixel_digest(arr if hasattr(arr, "detach") else torch.from_numpy(arr.astype(np.float64)))


def observed_from_artifact(
    artifact: StepArtifact,
    *,
    pixel_digests: Sequence[Sequence[str]] | None = None,
    materialized_routes: np.ndarray | None = None,
) -> ObservedStep:
    """The audit's view of one step artifact.

    `pixel_digests` (one tuple per row) replaces the artifact's own digests; the runner passes
    `rgb_pixel_digest` of the batch's pixel tensors so images are compared in the oracle's
    formula whatever digest the artifact format uses. `materialized_routes` (R, S, L, K), the
    batch's own routes, stand in when the artifact carries none (router replay off): routes a
    trainer materializes are compared like replayed ones, as the golden files compare them.
    """
    a = artifact.arrays
    routes = a.get("routed_experts")
    if routes is None and materialized_routes is not None:
        routes = np.asarray(materialized_routes)
        if routes.ndim != 4 or routes.shape[0] != artifact.num_rows:
            raise ValueError(f"the batch's routed_experts has shape {routes.shape}; expected ({artifact.num_rows}, S, L, K)")
    rows: list[ObservedRow] = []
    digests = artifact.row_pixel_digests if pixel_digests is None else tuple(tuple(d) for d in pixel_digests)
    if len(digests) != artifact.num_rows:
        raise ValueError(f"pixel_digests has {len(digests)} rows; the artifact has {artifact.num_rows}")
    for r in range(artifact.num_rows):
        rows.append(ObservedRow(
            row_index=r,
            physical_trace_id=artifact.row_physical_trace_id[r],
            logical_rollout_id=artifact.row_logical_rollout_id[r],
            parent_index=int(a["parent_indices"][r]),
            trace_index=int(a["row_trace_index"][r]),
            input_ids=a["row_input_ids"][r],
            length=int(a["row_input_lengths"][r]),
            token_mask=a["row_token_mask"][r],
            generation_logprobs=a["row_generation_logprobs"][r],
            advantages=a["row_advantages"][r],
            sample_mask=float(a["row_sample_mask"][r]),
            media_ids=tuple(artifact.row_media_ids[r]),
            pixel_digests=tuple(digests[r]),
            declared_sentinel_positions=tuple(artifact.row_sentinel_positions[r]),
            routes=None if routes is None else routes[r],
            generation_policy_version=int(a["row_generation_policy_version"][r]),
        ))
    logical = tuple(
        ObservedLogical(
            index=int(rec.get("index", i)),
            rollout_id=str(rec["rollout_id"]),
            advantage=float(rec["advantage"]),
            reward=None if rec.get("reward") is None else float(rec["reward"]),
            mask_sample=bool(rec.get("mask_sample", False)),
        )
        for i, rec in enumerate(artifact.logical)
    )
    return ObservedStep(
        step=artifact.step,
        rows=tuple(rows),
        logical=logical,
        metrics=dict(artifact.metrics),
        dp_size=artifact.dp_size,
        micro_batch_size=artifact.micro_batch_size,
        optimizer_steps=artifact.optimizer_steps,
        scheduler_increments=artifact.scheduler_increments,
    )


__all__ = [
    "BACKEND_ERROR",
    "ObservedError",
    "ObservedLogical",
    "ObservedRow",
    "ObservedRun",
    "ObservedStep",
    "observed_from_artifact",
    "rgb_pixel_digest",
]
