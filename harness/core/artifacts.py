"""The per-step training artifact: what one optimizer step trained on, as `.npz` bytes plus JSON.

One artifact per optimizer step lets the audit (and any other reader) check, after the run and
without importing the trainer, exactly which rows trained, with which masks, advantages, routes,
logprobs and policy versions, and which metrics the step reported. Encoding and decoding are
pure (bytes and dicts in, bytes and dicts out); the caller writes the files, conventionally
``step-NNNN.npz`` and ``step-NNNN.json`` side by side.

Format ``compactsim-step-artifact/1`` (R = rows incl. padding, S = padded length, L = MoE
layers, K = top-k; every array is the batch's, padding rows included):

``.npz`` — a zip of `.npy` arrays, DEFLATE-compressed, entry timestamps fixed to 1980-01-01 so
equal artifacts are equal bytes; read it with `np.load(io.BytesIO(data))`.

=================================  ===========  =================================================
array                              dtype        meaning
=================================  ===========  =================================================
``row_input_ids`` (R, S)           int32        last prompt of the trace + its sampled ids
``row_input_lengths`` (R,)         int32        unpadded length (0 for padding rows)
``row_token_mask`` (R, S)          uint8        1 exactly on trained (sampled) tokens
``row_sample_mask`` (R,)           float64      0 for padding rows and `mask_sample` rollouts
``row_advantages`` (R, S)          float64      per-token advantage (parent's logical value)
``row_generation_logprobs`` (R,S)  float64      behaviour logprob at the token's own position
``row_prev_logprobs`` (R, S)       float64      trainer logprob under the weights that trained
``row_reference_logprobs`` (R,S)   float64      reference-policy logprob (absent without KL)
``parent_indices`` (R,)            int64        row → logical rollout index; -1 for padding
``row_trace_index`` (R,)           int64        physical trace index inside its rollout
``row_generation_policy_version``  int64        policy version that generated the row (-1: none)
``row_trained_policy_version``     int64        policy version whose weights computed the
                                                gradient (-1 for padding rows)
``routed_experts`` (R, S, L, K)    int16/int32  the routes replayed by the trainer; -1 rows fell
                                                back to the router (absent when replay was off)
=================================  ===========  =================================================

Logprobs and advantages are stored as float64 (an exact upcast of float32/bfloat16 values).

``.json`` — ``format``, ``step``, ``trained_policy_version``, ``dp_size``,
``micro_batch_size``, ``optimizer_steps`` and ``scheduler_increments`` (this step's counts),
``arrays`` (name → dtype and shape, a manifest), per-row lists ``row_logical_rollout_id``,
``row_physical_trace_id``, ``row_mask_spans`` (half-open [start, end) per call),
``row_media_ids`` (the row's ordered image history), ``row_pixel_digests`` (sha256 of each
image's 8-bit RGB pixels, H×W×3 row-major, see `pixel_digest`), ``row_sentinel_positions``,
``logical`` (one record per logical rollout: reward, baseline, std, advantage, rows, ...),
``metrics`` (the step's metrics; never timings) and ``replay`` (async only: the replay-buffer
groups the step sampled, with generation and target versions; else null).
"""

from __future__ import annotations

import io
import json
import math
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.core.digests import bytes_digest

ARTIFACT_FORMAT = "compactsim-step-artifact/1"

#: Every array an artifact can hold, in file order; the last two are optional.
ARRAY_NAMES: tuple[str, ...] = (
    "row_input_ids",
    "row_input_lengths",
    "row_token_mask",
    "row_sample_mask",
    "row_advantages",
    "row_generation_logprobs",
    "row_prev_logprobs",
    "parent_indices",
    "row_trace_index",
    "row_generation_policy_version",
    "row_trained_policy_version",
    "row_reference_logprobs",
    "routed_experts",
)
OPTIONAL_ARRAYS: frozenset[str] = frozenset({"row_reference_logprobs", "routed_experts"})

_DTYPES: dict[str, tuple[str, ...]] = {
    "row_input_ids": ("int32",),
    "row_input_lengths": ("int32",),
    "row_token_mask": ("uint8",),
    "row_sample_mask": ("float64",),
    "row_advantages": ("float64",),
    "row_generation_logprobs": ("float64",),
    "row_prev_logprobs": ("float64",),
    "row_reference_logprobs": ("float64",),
    "parent_indices": ("int64",),
    "row_trace_index": ("int64",),
    "row_generation_policy_version": ("int64",),
    "row_trained_policy_version": ("int64",),
    "routed_experts": ("int16", "int32"),
}
_PER_TOKEN = frozenset({"row_input_ids", "row_token_mask", "row_advantages", "row_generation_logprobs",
                        "row_prev_logprobs", "row_reference_logprobs"})
#: A zip entry's timestamp; fixed so the bytes depend only on the content.
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True, slots=True, eq=False)
class StepArtifact:
    """Everything one optimizer step trained on and reported; arrays are numpy (see the module docstring)."""

    step: int
    trained_policy_version: int
    arrays: Mapping[str, np.ndarray]
    row_logical_rollout_id: tuple[str | None, ...]
    row_physical_trace_id: tuple[str | None, ...]
    row_mask_spans: tuple[tuple[tuple[int, int], ...], ...]
    row_media_ids: tuple[tuple[str, ...], ...]
    row_pixel_digests: tuple[tuple[str, ...], ...]
    row_sentinel_positions: tuple[tuple[int, ...], ...]
    logical: tuple[Mapping[str, Any], ...]
    metrics: Mapping[str, float | int]
    #: This step's optimizer updates and LR-scheduler increments, as the trainer counted them (no default:
    #: a trainer that does not count cannot claim one).
    optimizer_steps: int
    scheduler_increments: int
    dp_size: int = 1
    micro_batch_size: int = 1
    replay: Mapping[str, Any] | None = field(default=None)

    @property
    def num_rows(self) -> int:
        return int(self.arrays["row_input_ids"].shape[0])

    def __post_init__(self) -> None:
        _check_arrays(self.arrays)
        r = self.num_rows
        for name in ("row_logical_rollout_id", "row_physical_trace_id", "row_mask_spans", "row_media_ids",
                     "row_pixel_digests", "row_sentinel_positions"):
            if len(getattr(self, name)) != r:
                raise ValueError(f"{name} has {len(getattr(self, name))} entries for {r} rows")


def pixel_digest(pixels: torch.Tensor) -> str:
    """sha256 of an image's 8-bit RGB pixels in H×W×3 row-major order (the oracle's and audit's formula).

    `pixels` is (3, H, W) in [0, 1]; values are re-quantised as `round(p * 255)`, so pixels
    decoded from the same PNG give the same digest in any float dtype.
    """
    q = torch.round(pixels.detach().to("cpu", torch.float64) * 255.0).clamp(0, 255).to(torch.uint8)  # (3, H, W)
    return bytes_digest(q.permute(1, 2, 0).contiguous().numpy().tobytes())


def artifact_from_batch(
    batch: TraceBatch,
    *,
    step: int,
    trained_policy_version: int,
    prev_logprobs: torch.Tensor,
    reference_logprobs: torch.Tensor | None,
    routes_used: torch.Tensor | None,
    metrics: Mapping[str, float | int],
    optimizer_steps: int,
    scheduler_increments: int,
    replay: Mapping[str, Any] | None = None,
) -> StepArtifact:
    """The artifact of one step that trained on `batch` (tensors may live on any device)."""

    def f64(t: torch.Tensor) -> np.ndarray:
        return t.detach().to("cpu", torch.float64).numpy().copy()

    mask = batch.row_token_mask.detach().to("cpu")
    if bool(((mask != 0) & (mask != 1)).any()):
        raise ValueError("row_token_mask holds values other than 0 and 1; the artifact stores it as uint8")
    real = batch.parent_indices.to("cpu") >= 0
    trained = torch.where(real, torch.tensor(trained_policy_version), torch.tensor(-1)).to(torch.int64)
    arrays: dict[str, np.ndarray] = {
        "row_input_ids": batch.row_input_ids.to("cpu", torch.int32).numpy().copy(),
        "row_input_lengths": batch.row_input_lengths.to("cpu", torch.int32).numpy().copy(),
        "row_token_mask": mask.to(torch.uint8).numpy().copy(),
        "row_sample_mask": f64(batch.row_sample_mask),
        "row_advantages": f64(batch.row_advantages),
        "row_generation_logprobs": f64(batch.row_generation_logprobs),
        "row_prev_logprobs": f64(prev_logprobs),
        "parent_indices": batch.parent_indices.to("cpu", torch.int64).numpy().copy(),
        "row_trace_index": batch.row_trace_index.to("cpu", torch.int64).numpy().copy(),
        "row_generation_policy_version": batch.row_generation_policy_version.to("cpu", torch.int64).numpy().copy(),
        "row_trained_policy_version": trained.numpy().copy(),
    }
    if reference_logprobs is not None:
        arrays["row_reference_logprobs"] = f64(reference_logprobs)
    if routes_used is not None:
        routes = routes_used.detach().to("cpu")
        arrays["routed_experts"] = routes.numpy().astype(np.int16 if routes.dtype == torch.int16 else np.int32)
    return StepArtifact(
        step=step,
        trained_policy_version=trained_policy_version,
        arrays=arrays,
        row_logical_rollout_id=batch.row_logical_rollout_id,
        row_physical_trace_id=batch.row_physical_trace_id,
        row_mask_spans=batch.row_mask_spans,
        row_media_ids=batch.row_media_ids,
        row_pixel_digests=tuple(tuple(pixel_digest(p) for p in row) for row in batch.row_pixel_values),
        row_sentinel_positions=batch.row_sentinel_positions,
        logical=tuple(rec.to_json() for rec in batch.logical),
        metrics=dict(metrics),
        dp_size=batch.dp_size,
        micro_batch_size=batch.micro_batch_size,
        optimizer_steps=optimizer_steps,
        scheduler_increments=scheduler_increments,
        replay=replay,
    )


def encode_step_artifact(artifact: StepArtifact) -> tuple[bytes, dict[str, Any]]:
    """(`.npz` bytes, JSON-ready metadata) of `artifact`; equal artifacts give equal bytes."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, mode="w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name in ARRAY_NAMES:
            if name not in artifact.arrays:
                continue
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_ZIP_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            with zf.open(info, mode="w") as fh:
                np.lib.format.write_array(fh, np.ascontiguousarray(artifact.arrays[name]), allow_pickle=False)
    meta: dict[str, Any] = {
        "format": ARTIFACT_FORMAT,
        "step": artifact.step,
        "trained_policy_version": artifact.trained_policy_version,
        "dp_size": artifact.dp_size,
        "micro_batch_size": artifact.micro_batch_size,
        "optimizer_steps": artifact.optimizer_steps,
        "scheduler_increments": artifact.scheduler_increments,
        "arrays": {
            name: {"dtype": str(artifact.arrays[name].dtype), "shape": list(artifact.arrays[name].shape)}
            for name in ARRAY_NAMES
            if name in artifact.arrays
        },
        "row_logical_rollout_id": list(artifact.row_logical_rollout_id),
        "row_physical_trace_id": list(artifact.row_physical_trace_id),
        "row_mask_spans": [[list(span) for span in spans] for spans in artifact.row_mask_spans],
        "row_media_ids": [list(ids) for ids in artifact.row_media_ids],
        "row_pixel_digests": [list(d) for d in artifact.row_pixel_digests],
        "row_sentinel_positions": [list(p) for p in artifact.row_sentinel_positions],
        "logical": [dict(rec) for rec in artifact.logical],
        "metrics": {k: _json_number(v) for k, v in artifact.metrics.items()},
        "replay": None if artifact.replay is None else dict(artifact.replay),
    }
    return buf.getvalue(), meta


def decode_step_artifact(npz: bytes, meta: Mapping[str, Any]) -> StepArtifact:
    """Inverse of `encode_step_artifact`; checks the format tag and the array manifest."""
    if meta.get("format") != ARTIFACT_FORMAT:
        raise ValueError(f"artifact format {meta.get('format')!r}: expected {ARTIFACT_FORMAT!r}")
    with np.load(io.BytesIO(npz), allow_pickle=False) as data:
        arrays = {name: data[name] for name in data.files}
    manifest = meta.get("arrays", {})
    if sorted(manifest) != sorted(arrays):
        raise ValueError(f"npz holds arrays {sorted(arrays)}; the JSON manifest lists {sorted(manifest)}")
    for name, info in manifest.items():
        got = {"dtype": str(arrays[name].dtype), "shape": list(arrays[name].shape)}
        if got != dict(info):
            raise ValueError(f"array {name!r} is {got}; the JSON manifest says {dict(info)}")
    return StepArtifact(
        step=int(meta["step"]),
        trained_policy_version=int(meta["trained_policy_version"]),
        arrays=arrays,
        row_logical_rollout_id=tuple(meta["row_logical_rollout_id"]),
        row_physical_trace_id=tuple(meta["row_physical_trace_id"]),
        row_mask_spans=tuple(tuple((int(a), int(b)) for a, b in spans) for spans in meta["row_mask_spans"]),
        row_media_ids=tuple(tuple(ids) for ids in meta["row_media_ids"]),
        row_pixel_digests=tuple(tuple(d) for d in meta["row_pixel_digests"]),
        row_sentinel_positions=tuple(tuple(int(p) for p in ps) for ps in meta["row_sentinel_positions"]),
        logical=tuple(dict(rec) for rec in meta["logical"]),
        metrics={k: _from_json_number(v) for k, v in meta["metrics"].items()},
        dp_size=int(meta["dp_size"]),
        micro_batch_size=int(meta["micro_batch_size"]),
        optimizer_steps=int(meta["optimizer_steps"]),
        scheduler_increments=int(meta["scheduler_increments"]),
        replay=meta.get("replay"),
    )


def meta_to_json(meta: Mapping[str, Any]) -> str:
    """The metadata as stable, compact JSON text (sorted keys, no spaces, trailing newline)."""
    return json.dumps(meta, sort_keys=True, separators=(",", ":"), allow_nan=False) + "\n"


def _json_number(value: float | int) -> float | int | str:
    """Metrics as strict JSON: ±inf and NaN (an empty `_min`/`_max`) become the strings "inf"/"-inf"/"nan"."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def _from_json_number(value: Any) -> float | int:
    if isinstance(value, str):
        return float(value)
    return value


def _check_arrays(arrays: Mapping[str, np.ndarray]) -> None:
    unknown = sorted(set(arrays) - set(ARRAY_NAMES))
    if unknown:
        raise ValueError(f"unknown artifact arrays {unknown}; expected names from ARRAY_NAMES")
    missing = [n for n in ARRAY_NAMES if n not in OPTIONAL_ARRAYS and n not in arrays]
    if missing:
        raise ValueError(f"artifact lacks arrays {missing}")
    r, s = arrays["row_input_ids"].shape
    for name, arr in arrays.items():
        if str(arr.dtype) not in _DTYPES[name]:
            raise ValueError(f"array {name!r} has dtype {arr.dtype}; expected {' or '.join(_DTYPES[name])}")
        want: Sequence[int] = (r, s) if name in _PER_TOKEN else (r,)
        if name == "routed_experts":
            if arr.ndim != 4 or tuple(arr.shape[:2]) != (r, s):
                raise ValueError(f"routed_experts has shape {arr.shape}; expected ({r}, {s}, L, K)")
        elif tuple(arr.shape) != tuple(want):
            raise ValueError(f"array {name!r} has shape {arr.shape}; expected {tuple(want)}")


__all__ = [
    "ARRAY_NAMES",
    "ARTIFACT_FORMAT",
    "OPTIONAL_ARRAYS",
    "StepArtifact",
    "artifact_from_batch",
    "decode_step_artifact",
    "encode_step_artifact",
    "meta_to_json",
    "pixel_digest",
]
