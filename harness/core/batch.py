"""The materialised training batch: physical rows as tensors plus one record per logical rollout.

It lives in `compactsim.harness.core` so the oracle, the audit and the report can read a batch (from the
reference pipeline or any other backend) without importing the pipeline. `parent_indices` is the
single source of truth for row → logical rollout; `-1` marks a padding row, and padding rows
always come after every real row.
"""

from __future__ import annotations

import math

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from compactsim.harness.core import metrics as M

#: A route row whose every top-k slot is this value means "no route captured": replay falls back
#: to the router for that token (NeMo-RL's ROUTED_EXPERTS_MISSING_ROUTE_SENTINEL).
MISSING_ROUTE_SENTINEL = -1
#: `parent_indices` value of a padding row.
PADDING_PARENT = -1


@dataclass(frozen=True, slots=True, eq=False)
class LogicalRecord:
    """One logical rollout of the batch: its GRPO quantities, its rows and its logical route copy."""

    index: int
    rollout_id: str
    group_key: str
    reward: float
    baseline: float
    std: float
    #: The logical GRPO advantage every trainable token of every row of this rollout receives.
    advantage: float
    #: Flagged by the environment: counts in the group baseline, leaves the loss (sample_mask 0).
    mask_sample: bool
    num_sampled_tokens: int
    #: Rows of this rollout in trace order (equal to `where(parent_indices == index)`).
    row_indices: tuple[int, ...]
    generation_policy_version: int | None
    #: Routes of the rollout's sampled tokens in call order, (num_sampled_tokens, L, K); None
    #: when the batch carries no routes. This is the logical copy, independent of the rows.
    sampled_routes: np.ndarray | None = None
    #: Indices into `sampled_routes` stamped with the boundary sentinel (last token of every
    #: non-final physical trace).
    route_sentinel_positions: tuple[int, ...] = ()
    #: Why each of the rollout's physical traces starts ("rollout_start", "declared_boundary",
    #: "inferred_discontinuity"), in trace order.
    trace_start_reasons: tuple[str, ...] = ()
    #: Turn ids of the rollout's calls that recorded no routed experts, in call order (router replay
    #: refuses them in the Gym path; with replay off their positions replay -1, "use the router").
    #: Not in `to_json`: the evidence says it, and step artifacts keep their bytes.
    route_less_turns: tuple[int, ...] = ()
    #: The advantage before `advantage_clip_low/high` (None in a record built without it: `advantage`);
    #: `advantages/sum` is logged from it, as NeMo-RL logs it before clipping (semantics §3.7).
    unclipped_advantage: float | None = None

    @property
    def logged_advantage(self) -> float:
        """What `advantages/sum` adds up for this rollout: its advantage before clipping."""
        return self.advantage if self.unclipped_advantage is None else self.unclipped_advantage

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "rollout_id": self.rollout_id,
            "group_key": self.group_key,
            "reward": self.reward,
            "baseline": self.baseline,
            "std": self.std,
            "advantage": self.advantage,
            "mask_sample": self.mask_sample,
            "num_sampled_tokens": self.num_sampled_tokens,
            "row_indices": list(self.row_indices),
            "generation_policy_version": self.generation_policy_version,
            "route_sentinel_positions": list(self.route_sentinel_positions),
            "trace_start_reasons": list(self.trace_start_reasons),
        }


@dataclass(frozen=True, slots=True, eq=False)
class TraceBatch:
    """Physical rows ready for the optimizer; R rows (real first, then padding) of S tokens.

    Tensors (R = rows, S = padded sequence length, L = MoE layers, K = top-k):

    - `row_input_ids` (R, S) int64: last prompt of the trace + its sampled ids, right-padded.
    - `row_input_lengths` (R,) int32: unpadded length; 0 for padding rows (or 1: NeMo-RL's trace batch gives each
      padding row one pad token).
    - `row_token_mask` (R, S) float: 1 exactly on the sampled ids of every call of the trace.
    - `row_generation_logprobs` (R, S) float: behaviour logprob at the token's own position.
    - `row_advantages` (R, S) float: the parent's logical advantage on the mask, 0 elsewhere.
    - `row_sample_mask` (R,) float: 0 for padding rows and for rows of `mask_sample` rollouts.
    - `parent_indices` (R,) int64: index into `logical`; -1 for padding.
    - `row_trace_index` (R,) int64 and `row_generation_policy_version` (R,) int64 (-1: padding/unknown).
    - `routed_experts` (R, S, L, K) or None: replay routes; -1 rows fall back to the router,
      positions past a row's length and padding rows hold `arange(K)`.
    """

    row_input_ids: torch.Tensor
    row_input_lengths: torch.Tensor
    row_token_mask: torch.Tensor
    row_generation_logprobs: torch.Tensor
    row_advantages: torch.Tensor
    row_sample_mask: torch.Tensor
    parent_indices: torch.Tensor
    row_trace_index: torch.Tensor
    row_generation_policy_version: torch.Tensor
    routed_experts: torch.Tensor | None
    row_logical_rollout_id: tuple[str | None, ...]
    row_physical_trace_id: tuple[str | None, ...]
    #: Half-open [start, end) spans of each row's token mask (one per call with sampled ids).
    row_mask_spans: tuple[tuple[tuple[int, int], ...], ...]
    #: Ordered media of each row's last prompt, duplicates included.
    row_media_ids: tuple[tuple[str, ...], ...]
    #: Pixels for `row_media_ids`, each (3, H, W) float64 holding exact 8-bit values k/255 (cast them to the
    #: compute dtype; float32 pixels would differ by up to 2.8e-8); identical images share a tensor.
    row_pixel_values: tuple[tuple[torch.Tensor, ...], ...]
    #: Row positions stamped with the boundary route sentinel.
    row_sentinel_positions: tuple[tuple[int, ...], ...]
    logical: tuple[LogicalRecord, ...]
    dp_size: int = 1
    micro_batch_size: int = 1
    #: One logical batch = one optimizer step, whatever the row count.
    optimizer_steps: int = 1

    def __post_init__(self) -> None:
        _validate(self)

    # ------------------------------------------------------------------ sizes

    @property
    def num_rows(self) -> int:
        return int(self.row_input_ids.shape[0])

    @property
    def seq_len(self) -> int:
        return int(self.row_input_ids.shape[1])

    @property
    def num_real_rows(self) -> int:
        return int((self.parent_indices >= 0).sum().item())

    @property
    def num_padding_rows(self) -> int:
        return self.num_rows - self.num_real_rows

    @property
    def num_logical(self) -> int:
        return len(self.logical)

    @property
    def rollout_advantages(self) -> torch.Tensor:
        """(N,) float64 logical advantages in `logical` order."""
        return torch.tensor([r.advantage for r in self.logical], dtype=torch.float64)

    @property
    def rollout_rewards(self) -> torch.Tensor:
        """(N,) float64 rewards in `logical` order."""
        return torch.tensor([r.reward for r in self.logical], dtype=torch.float64)

    def global_valid_tokens(self) -> int:
        """Tokens the loss normalises by: Σ token_mask[:, 1:] · sample_mask over every row of the batch."""
        m = self.row_token_mask[:, 1:].to(torch.float64) * self.row_sample_mask.to(torch.float64)[:, None]
        return int(m.sum().item())

    # --------------------------------------------------------- sharding for dp

    def rank_rows(self, dp_rank: int) -> range:
        """Rows data-parallel rank `dp_rank` trains on: a contiguous block of R / dp_size rows."""
        if not 0 <= dp_rank < self.dp_size:
            raise ValueError(f"dp_rank={dp_rank} outside [0, {self.dp_size})")
        per_rank = self.num_rows // self.dp_size
        return range(dp_rank * per_rank, (dp_rank + 1) * per_rank)

    def microbatch_rows(self, dp_rank: int) -> tuple[range, ...]:
        """The rank's rows cut into microbatches of `micro_batch_size` rows, in order."""
        rows = self.rank_rows(dp_rank)
        mbs = self.micro_batch_size
        return tuple(range(s, s + mbs) for s in range(rows.start, rows.stop, mbs))

    def select(self, rows: Sequence[int] | range) -> dict[str, Any]:
        """The per-row fields of `rows` (tensors indexed, tuples picked) as one dict."""
        idx = torch.as_tensor(list(rows), dtype=torch.long)
        out: dict[str, Any] = {
            "row_input_ids": self.row_input_ids[idx],
            "row_input_lengths": self.row_input_lengths[idx],
            "row_token_mask": self.row_token_mask[idx],
            "row_generation_logprobs": self.row_generation_logprobs[idx],
            "row_advantages": self.row_advantages[idx],
            "row_sample_mask": self.row_sample_mask[idx],
            "parent_indices": self.parent_indices[idx],
            "row_trace_index": self.row_trace_index[idx],
            "row_generation_policy_version": self.row_generation_policy_version[idx],
            "routed_experts": None if self.routed_experts is None else self.routed_experts[idx],
            "row_media_ids": tuple(self.row_media_ids[i] for i in idx.tolist()),
            "row_pixel_values": tuple(self.row_pixel_values[i] for i in idx.tolist()),
        }
        return out

    def to(self, device: torch.device | str) -> TraceBatch:
        """The same batch with every tensor on `device` (logical records stay on the host)."""

        def mv(t: torch.Tensor) -> torch.Tensor:
            return t.to(device)

        return replace(
            self,
            row_input_ids=mv(self.row_input_ids),
            row_input_lengths=mv(self.row_input_lengths),
            row_token_mask=mv(self.row_token_mask),
            row_generation_logprobs=mv(self.row_generation_logprobs),
            row_advantages=mv(self.row_advantages),
            row_sample_mask=mv(self.row_sample_mask),
            parent_indices=mv(self.parent_indices),
            row_trace_index=mv(self.row_trace_index),
            row_generation_policy_version=mv(self.row_generation_policy_version),
            routed_experts=None if self.routed_experts is None else mv(self.routed_experts),
            row_pixel_values=tuple(tuple(mv(p) for p in px) for px in self.row_pixel_values),
        )

    # ---------------------------------------------------------------- metrics

    def metrics(self) -> dict[str, float | int]:
        """Batch metrics, identical for sync and async callers (keys from `compactsim.harness.core.metrics`)."""
        real = self.parent_indices >= 0
        rows_per = [len(r.row_indices) for r in self.logical]
        logical_adv = [r.advantage for r in self.logical]
        mask = self.row_token_mask.to(torch.float64)
        adv = self.row_advantages.to(torch.float64)
        on = mask > 0
        n_on = int(on.sum().item())
        return {
            M.NUM_PHYSICAL_ROWS: int(real.sum().item()),
            M.NUM_PADDING_ROWS: int((~real).sum().item()),
            M.NUM_LOGICAL_ROLLOUTS: len(self.logical),
            M.NUM_SPLIT_ROLLOUTS: sum(1 for n in rows_per if n > 1),
            M.ROWS_PER_ROLLOUT_MAX: max(rows_per, default=0),
            M.LOGICAL_ADVANTAGES_MEAN: float(np.mean(logical_adv)) if logical_adv else 0.0,
            M.LOGICAL_ADVANTAGES_SUM: float(np.sum(logical_adv, dtype=np.float64)) if logical_adv else 0.0,
            M.SCHEDULER_STEP_INCREMENT: len(self.logical),
            M.PR_LOGICAL_ROLLOUTS: len(self.logical),
            M.PR_PHYSICAL_TRACES: int(real.sum().item()),
            M.PR_PADDING_ROWS: int((~real).sum().item()),
            M.PR_PHYSICAL_ROWS: int(real.numel()),
            M.PR_ELIGIBLE_ACTION_TOKENS: int(on[real].sum().item()),
            M.PR_DECLARED_BOUNDARIES: sum(r.trace_start_reasons.count("declared_boundary") for r in self.logical),
            M.PR_INFERRED_DISCONTINUITIES: sum(r.trace_start_reasons.count("inferred_discontinuity") for r in self.logical),
            # NeMo-RL sums its unmasked, broadcast [B, S] advantages before clipping them: S_pad · Σ_rows Â_parent(row)
            M.ADVANTAGES_SUM: float(math.fsum(self.logical[p].logged_advantage for p in self.parent_indices[real].tolist())
                                    * self.row_input_ids.shape[1]),
            M.ADVANTAGES_MEAN: float((adv * mask).sum().item() / n_on) if n_on else 0.0,
            M.ADVANTAGES_MIN: float(adv[on].min().item()) if n_on else 0.0,
            M.ADVANTAGES_MAX: float(adv[on].max().item()) if n_on else 0.0,
            M.NUM_MASK_SAMPLE_FILTERED: sum(1 for r in self.logical if r.mask_sample),
            M.TOTAL_NUM_TOKENS: int(self.row_input_lengths[real].to(torch.int64).sum().item()),
        }


def _validate(b: TraceBatch) -> None:
    """Shape and `parent_indices` invariants; a violation is a bug in whoever built the batch."""
    if b.row_input_ids.dim() != 2:
        raise ValueError(f"row_input_ids must be (R, S), got {tuple(b.row_input_ids.shape)}")
    r, s = b.row_input_ids.shape
    for name in ("row_token_mask", "row_generation_logprobs", "row_advantages"):
        shape = tuple(getattr(b, name).shape)
        if shape != (r, s):
            raise ValueError(f"{name} has shape {shape}; row_input_ids is {(r, s)}")
    for name in ("row_input_lengths", "row_sample_mask", "parent_indices", "row_trace_index", "row_generation_policy_version"):
        shape = tuple(getattr(b, name).shape)
        if shape != (r,):
            raise ValueError(f"{name} has shape {shape}; expected ({r},)")
    for name in ("row_logical_rollout_id", "row_physical_trace_id", "row_mask_spans", "row_media_ids",
                 "row_pixel_values", "row_sentinel_positions"):
        if len(getattr(b, name)) != r:
            raise ValueError(f"{name} has {len(getattr(b, name))} entries for {r} rows")
    if b.routed_experts is not None and (b.routed_experts.dim() != 4 or tuple(b.routed_experts.shape[:2]) != (r, s)):
        raise ValueError(f"routed_experts has shape {tuple(b.routed_experts.shape)}; expected ({r}, {s}, L, K)")
    if b.dp_size < 1 or b.micro_batch_size < 1 or r % (b.dp_size * b.micro_batch_size):
        raise ValueError(f"{r} rows are not divisible by dp_size {b.dp_size} × micro_batch_size {b.micro_batch_size}")
    validate_parent_indices(b.parent_indices, len(b.logical))
    pad = b.parent_indices == PADDING_PARENT
    if bool(pad.any()):
        weight = (b.row_token_mask[pad] != 0).any(dim=1) | (b.row_advantages[pad] != 0).any(dim=1)
        # a padding row holds no token (compactsim's batches) or one pad token (NeMo-RL's trace batch); both weigh nothing
        weight |= (b.row_sample_mask[pad] != 0) | (b.row_input_lengths[pad] > 1)
        if bool(weight.any()):
            row = int(pad.nonzero()[int(weight.nonzero()[0])])
            raise ValueError(f"padding row {row} has a non-zero mask, advantage or sample_mask, or more than one token")
    parents = b.parent_indices.tolist()
    for row, p in enumerate(parents):
        is_pad = p == PADDING_PARENT
        if is_pad != (b.row_logical_rollout_id[row] is None):
            raise ValueError(f"row {row}: parent_indices={p} but logical_rollout_id={b.row_logical_rollout_id[row]!r}")
        if not is_pad and b.row_logical_rollout_id[row] != b.logical[p].rollout_id:
            raise ValueError(
                f"row {row}: logical_rollout_id {b.row_logical_rollout_id[row]!r} differs from its parent "
                f"{b.logical[p].rollout_id!r} (parent_indices is the single source of truth)"
            )
    rows_of: dict[int, list[int]] = {}
    for row, p in enumerate(parents):
        rows_of.setdefault(p, []).append(row)
    for i, rec in enumerate(b.logical):
        if rec.index != i:
            raise ValueError(f"logical record at position {i} has index {rec.index}")
        rows = tuple(rows_of.get(i, ()))
        if rows != rec.row_indices:
            raise ValueError(f"logical record {rec.index} lists rows {rec.row_indices}; parent_indices gives {rows}")


def validate_parent_indices(parent_indices: torch.Tensor, num_logical: int) -> None:
    """`parent_indices` maps real rows to [0, num_logical), covers every rollout, and pads only at the end."""
    values = parent_indices.tolist()
    seen: set[int] = set()
    padding_started = False
    for row, p in enumerate(values):
        if p == PADDING_PARENT:
            padding_started = True
            continue
        if p < 0 or p >= num_logical:
            raise ValueError(f"parent_indices[{row}]={p}: expected -1 (padding) or an index in [0, {num_logical})")
        if padding_started:
            raise ValueError(f"parent_indices[{row}]={p} follows a padding row; padding rows must come last")
        seen.add(p)
    missing = sorted(set(range(num_logical)) - seen)
    if missing:
        raise ValueError(f"logical rollouts {missing[:8]} own no row in parent_indices")


__all__ = ["MISSING_ROUTE_SENTINEL", "PADDING_PARENT", "LogicalRecord", "TraceBatch", "validate_parent_indices"]
