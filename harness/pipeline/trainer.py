"""One GRPO optimizer step on physical trace rows, read top to bottom.

`grpo_step(state, results, cfg)` takes one logical batch of Gym `/run` results and runs, in
order: plan every rollout → logical advantages (one per rollout, grouped by task) →
materialize rows and pad → `train_step`. `train_step(state, batch, cfg)` then runs:

1. the reference policy's logprobs of every row (when the KL penalty is on), replaying the
   recorded routes (an all ``-1`` route row falls back to the router). While the reference's
   weights are still bit for bit the policy's (step 0, the reference being the initial policy),
   that pass would repeat step 2's forwards on the same weights and microbatches, so those
   forwards, detached, stand in for it, as they do for `prev` below;
2. micro-batched forward/backward over all rows, sharded over `dp_size` simulated data-parallel
   ranks exactly as `TraceBatch.rank_rows` / `microbatch_rows` cut them; every microbatch loss
   is divided by the valid-token count of the *whole logical batch*, so summed gradients are
   the gradient of the global token mean. The trainer's logprobs under the weights before the
   update (`prev`) are each microbatch's training forward, detached: no weight changes before
   the step's one optimizer step, so NeMo-RL's separate no-grad pass over the same microbatches
   gives these very numbers (bit for bit on every step of the default suite; a unit test keeps
   it so) at the cost of one more forward;
3. the dp all-reduce (mean over ranks, ranks in order), gradient clipping;
4. exactly one optimizer step and one LR-scheduler increment, whatever the row count;
5. metrics (batch metrics + loss metrics + grad norm + lr + versions) and the step artifact.

Pushing the new weights to the generation server is a side effect left to the caller
(`compactsim.harness.train_run`); `state.version` already names the version those weights will get.
No hidden state beyond `state`. Semantics: `shared/reference/nemo-rl-semantics.md` §3-§6.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from compactsim.harness.core import metrics as M
from compactsim.harness.core.artifacts import StepArtifact, artifact_from_batch
from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.core.errors import ConfigError, ContractError
from compactsim.harness.core.policy import PolicyConfig as ModelConfig
from compactsim.harness.core.policy import TinyPolicy
from compactsim.harness.pipeline.advantages import compute_logical_advantages
from compactsim.harness.pipeline.batch_metrics import step_metrics
from compactsim.harness.pipeline.loss import clipped_pg_loss, combine_metrics, valid_counts
from compactsim.harness.pipeline.materializer import prepare_trace_batch
from compactsim.harness.pipeline.planner import plan_rollout
from compactsim.harness.pipeline.train_config import TrainerConfig, validate_physical_trace_training_config

#: `policy.precision` → torch dtype of the trained weights.
PRECISIONS: dict[str, torch.dtype] = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}
#: AdamW moments and epsilon (NeMo-RL's defaults).
ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


@dataclass(slots=True, eq=False)
class TrainState:
    """Everything a step reads and advances: weights, reference weights, optimizer, scheduler, counters.

    `version` is the policy version of `policy`'s current weights (the generation server's
    `policy_version` once they are pushed); a step advances it and `optimizer_steps` by one. The
    harness reads what a step did from `optimizer` and `scheduler` themselves (counters, AdamW's
    first moments, the learning rate), so a step must run on these objects; `.grad` is not read.
    """

    policy: TinyPolicy
    reference: TinyPolicy | None
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    version: int = 0
    #: `optimizer.step()` calls so far (one per logical batch).
    optimizer_steps: int = 0

    @property
    def device(self) -> torch.device:
        return self.policy.device

    @property
    def dtype(self) -> torch.dtype:
        return self.policy.dtype

    @property
    def scheduler_steps(self) -> int:
        """LR-scheduler increments so far, read from the scheduler itself."""
        return int(self.scheduler.last_epoch)


@dataclass(frozen=True, slots=True, eq=False)
class StepResult:
    """What one optimizer step produced; `artifact` is what the audit reads."""

    step: int
    batch: TraceBatch
    metrics: dict[str, float | int]
    artifact: StepArtifact
    #: (R, S) trainer logprobs under the weights that trained (host, the policy's dtype).
    prev_logprobs: torch.Tensor
    #: Version whose weights computed the gradient, and the version of the updated weights.
    trained_version: int
    new_version: int


def init_train_state(
    cfg: TrainerConfig,
    *,
    device: str | torch.device = "cpu",
    model_config: ModelConfig = ModelConfig(),
    version: int = 0,
) -> TrainState:
    """Seeded weights (`grpo.seed`), a frozen reference copy when the KL penalty is on, AdamW and a warmup schedule.

    The weights equal the mock server's policy-mode weights for the same seed, so generation
    and training start from one checkpoint.
    """
    cfg = validate_physical_trace_training_config(cfg)
    p = cfg.policy
    policy = TinyPolicy.from_seed(cfg.grpo.seed, model_config, dtype=PRECISIONS[p.precision], device=device)
    policy.train()
    reference: TinyPolicy | None = None
    if cfg.loss_fn.reference_policy_kl_penalty != 0:
        reference = copy.deepcopy(policy).eval().requires_grad_(False)
    optimizer = torch.optim.AdamW(
        policy.parameters(), lr=p.learning_rate, betas=ADAM_BETAS, eps=ADAM_EPS, weight_decay=p.weight_decay,
        foreach=False,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _WarmupFactor(p.lr_warmup_steps))
    return TrainState(policy=policy, reference=reference, optimizer=optimizer, scheduler=scheduler, version=version)


class _WarmupFactor:
    """LR multiplier after `n` scheduler increments: linear warmup over `warmup` increments, then 1."""

    def __init__(self, warmup: int) -> None:
        self.warmup = warmup

    def __call__(self, n: int) -> float:
        return 1.0 if self.warmup == 0 else min(1.0, (n + 1) / self.warmup)


def grpo_step(state: TrainState, results: Sequence[Mapping[str, Any]], cfg: TrainerConfig) -> StepResult:
    """One logical batch of Gym `/run` results → one optimizer step (see the module docstring)."""
    plans = [plan_rollout(result) for result in results]  # logical rollout → physical traces
    logical = compute_logical_advantages([p.evidence for p in plans], cfg.advantage_config())  # one per rollout
    batch = prepare_trace_batch(plans, None, logical, cfg.materialize_config())  # rows, then padding rows
    return train_step(state, batch, cfg)


def train_step(state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
    """Exactly one optimizer step and one scheduler increment on `batch` (see the module docstring)."""
    cfg = validate_physical_trace_training_config(cfg)
    check_batch(batch, cfg)
    policy, device = state.policy, state.device
    step, trained_version = state.optimizer_steps, state.version
    loss_cfg = cfg.loss_fn

    # ---- inputs shared by every pass: exact pixels in the compute dtype, replay routes, normalisers
    row_images = _row_images(batch, dtype=state.dtype, device=device)  # R lists of (3, H, W)
    row_routes = batch.routed_experts if cfg.policy.router_replay_enabled else None  # (R, S, L, K) | None
    n = valid_counts(batch.row_token_mask, batch.row_sample_mask)  # Σ over ALL rows of the logical batch

    # ---- 1. logprobs under the reference; those under the current weights come with step 2's forwards
    prev = torch.zeros(batch.row_input_ids.shape, dtype=policy.dtype)  # (R, S), host
    ref = None
    ref_is_prev = False  # the reference's weights are the policy's: its logprobs are `prev`, filled in step 2
    if loss_cfg.reference_policy_kl_penalty != 0:
        assert state.reference is not None, "TrainState has no reference policy but the KL penalty is on"
        ref_is_prev = _same_weights(state.reference, policy)
        if not ref_is_prev:
            microbatches = [(rank, rows) for rank in range(batch.dp_size) for rows in batch.microbatch_rows(rank)]
            ref = _all_logprobs(state.reference, batch, microbatches, row_images, row_routes)  # (R, S)

    # ---- 2. micro-batched forward/backward, one simulated dp rank after the other
    params = [p for p in policy.parameters() if p.requires_grad]
    state.optimizer.zero_grad(set_to_none=True)
    rank_grads: list[list[torch.Tensor]] = []
    mb_metrics: list[dict[str, float]] = []
    for rank in range(batch.dp_size):
        for rows in batch.microbatch_rows(rank):
            mb = _slice(batch, rows, row_images, row_routes, device)
            mb_curr = policy.token_logprobs(mb.ids, mb.images, mb.routes, mb.lengths)  # (mb, W)
            mb_prev = mb_curr.detach()  # the weights before the update (see the module docstring)
            if ref_is_prev:
                mb_ref = mb_prev
            else:
                mb_ref = None if ref is None else ref[rows.start:rows.stop, : mb.width].to(device)
            prev[rows.start:rows.stop, : mb.width] = mb_prev.cpu()
            out = clipped_pg_loss(
                loss_cfg,
                curr_logprobs=mb_curr,
                token_mask=mb.token_mask,
                sample_mask=mb.sample_mask,
                advantages=mb.advantages,
                prev_logprobs=mb_prev,
                generation_logprobs=mb.generation_logprobs,
                reference_logprobs=mb_ref,
                global_valid_tokens=n.tokens,
                global_valid_seqs=n.seqs,
            )
            # The loss is already divided by the GLOBAL token count, so accumulating (summing)
            # microbatch gradients gives this rank's share of the batch-mean gradient. The
            # all-reduce below averages over ranks (as FSDP does); × dp_size undoes that mean.
            (out.loss * batch.dp_size).backward()
            mb_metrics.append(out.metrics)
        rank_grads.append(_take_grads(params))  # this rank's accumulated gradient; .grad reset to None

    if ref_is_prev:
        ref = prev.clone()

    # ---- 3. all-reduce (mean over ranks, fixed rank order), then clip
    for i, p in enumerate(params):
        p.grad = torch.stack([g[i] for g in rank_grads]).sum(0) / batch.dp_size
    grad_norm = _clip_grad_norm(params, cfg.policy.max_grad_norm)

    # ---- 4. exactly one optimizer step and one scheduler increment per logical batch
    lr = float(state.optimizer.param_groups[0]["lr"])
    updates_before, epoch_before = _optimizer_updates(state.optimizer), state.scheduler_steps
    state.optimizer.step()
    state.optimizer_steps += 1
    state.scheduler.step()
    state.version += 1
    updates = _optimizer_updates(state.optimizer) - updates_before  # counted from the optimizer's own state
    increments = state.scheduler_steps - epoch_before

    # ---- 5. metrics and the step artifact
    train_metrics: dict[str, float | int] = {
        **combine_metrics(mb_metrics),
        M.GRAD_NORM: grad_norm,
        M.LR: lr,
        M.GLOBAL_VALID_TOKENS: n.tokens,
        M.GLOBAL_VALID_SEQS: n.seqs,
        M.TRAINED_POLICY_VERSION: trained_version,
        M.OPTIMIZER_STEP_COUNT: state.optimizer_steps,
        M.SCHEDULER_STEP_COUNT: state.scheduler_steps,
        M.OPTIMIZER_STEPS: updates,
        M.SCHEDULER_INCREMENTS: increments,
    }
    metrics = step_metrics(batch, train_metrics)
    artifact = artifact_from_batch(
        batch,
        step=step,
        trained_policy_version=trained_version,
        prev_logprobs=prev,
        reference_logprobs=ref,
        routes_used=row_routes,
        metrics=metrics,
        optimizer_steps=updates,
        scheduler_increments=increments,
    )
    return StepResult(
        step=step, batch=batch, metrics=metrics, artifact=artifact, prev_logprobs=prev,
        trained_version=trained_version, new_version=state.version,
    )


# ---------------------------------------------------------------------------------------------
# helpers (pure apart from the autograd state of the parameters they are given)


@dataclass(frozen=True, slots=True, eq=False)
class _Microbatch:
    """Rows of one microbatch, cut to `width` = the longest row (at least 2 tokens), on the device."""

    width: int
    ids: torch.Tensor  # (mb, W)
    lengths: torch.Tensor  # (mb,)
    token_mask: torch.Tensor  # (mb, W)
    sample_mask: torch.Tensor  # (mb,)
    advantages: torch.Tensor  # (mb, W)
    generation_logprobs: torch.Tensor  # (mb, W)
    routes: torch.Tensor | None  # (mb, W, L, K)
    images: list[list[torch.Tensor]]


def _slice(
    batch: TraceBatch,
    rows: range,
    row_images: Sequence[list[torch.Tensor]],
    row_routes: torch.Tensor | None,
    device: torch.device,
) -> _Microbatch:
    a, b = rows.start, rows.stop
    width = max(2, int(batch.row_input_lengths[a:b].max()))  # causal: columns past every length change nothing
    return _Microbatch(
        width=width,
        ids=batch.row_input_ids[a:b, :width].to(device),
        lengths=batch.row_input_lengths[a:b].to(device),
        token_mask=batch.row_token_mask[a:b, :width].to(device),
        sample_mask=batch.row_sample_mask[a:b].to(device),
        advantages=batch.row_advantages[a:b, :width].to(device),
        generation_logprobs=batch.row_generation_logprobs[a:b, :width].to(device),
        routes=None if row_routes is None else row_routes[a:b, :width].to(device),
        images=list(row_images[a:b]),
    )


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    """Whether two models hold bit-identical parameters and buffers: same names, dtypes, devices and values
    (`torch.equal` alone would call a float32 copy equal to its float64 original; a NaN is never equal)."""
    ta = [*a.named_parameters(), *a.named_buffers()]
    tb = [*b.named_parameters(), *b.named_buffers()]
    return len(ta) == len(tb) and all(
        na == nb and x.dtype == y.dtype and x.device == y.device and torch.equal(x, y)
        for (na, x), (nb, y) in zip(ta, tb)
    )


@torch.no_grad()
def _all_logprobs(
    policy: TinyPolicy,
    batch: TraceBatch,
    microbatches: Sequence[tuple[int, range]],
    row_images: Sequence[list[torch.Tensor]],
    row_routes: torch.Tensor | None,
) -> torch.Tensor:
    """(R, S) own-position logprobs of every row, in the training microbatch layout (host tensor)."""
    out = torch.zeros(batch.row_input_ids.shape, dtype=policy.dtype)  # (R, S)
    for _, rows in microbatches:
        mb = _slice(batch, rows, row_images, row_routes, policy.device)
        out[rows.start:rows.stop, : mb.width] = policy.token_logprobs(mb.ids, mb.images, mb.routes, mb.lengths).cpu()
    return out


def _row_images(batch: TraceBatch, *, dtype: torch.dtype, device: torch.device) -> list[list[torch.Tensor]]:
    """Each row's images in the compute dtype: the batch's exact ``k/255`` float64 pixels, cast.

    A cast is all it takes: k/255 rounded to float64 and then to float32, float16 or bfloat16 is
    the value k/255 computed in that dtype (k/255 repeats an 8-bit pattern, so the float64 value
    never sits on a narrower format's rounding midpoint; checked for every k in the tests), which
    is what the generation server fed the model. Identical images (shared tensors) are converted once.
    """
    done: dict[int, torch.Tensor] = {}
    out: list[list[torch.Tensor]] = []
    for pixels in batch.row_pixel_values:
        row: list[torch.Tensor] = []
        for px in pixels:
            key = id(px)
            if key not in done:
                done[key] = px.to(device=device, dtype=dtype)
            row.append(done[key])
        out.append(row)
    return out


def _optimizer_updates(optimizer: torch.optim.Optimizer) -> int:
    """Updates the optimizer has applied so far: the largest per-parameter ``step`` in its state."""
    steps = [s.get("step", 0) for s in optimizer.state.values()]
    return max((int(v.item()) if isinstance(v, torch.Tensor) else int(v) for v in steps), default=0)


def _take_grads(params: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Detach each parameter's accumulated gradient (zeros where none) and clear `.grad`."""
    grads = []
    for p in params:
        grads.append(torch.zeros_like(p) if p.grad is None else p.grad.detach().clone())
        p.grad = None
    return grads


def _clip_grad_norm(params: Sequence[torch.Tensor], max_norm: float | None) -> float:
    """Total L2 norm of the gradients before clipping; scales them to `max_norm` when above it."""
    if max_norm is None:
        norms = torch.stack([torch.linalg.vector_norm(p.grad.to(torch.float64)) for p in params if p.grad is not None])
        return float(torch.linalg.vector_norm(norms))
    return float(torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=False))


def check_batch(batch: TraceBatch, cfg: TrainerConfig) -> None:
    """What the trainer refuses before it trains: a batch built for another geometry, generation
    versions mixed where unsound, router replay without routes, a row over the sequence limit.

    `train_step` runs it first; `compactsim.harness.golden.backend_dump` runs it without training.
    """
    p = cfg.policy
    if (batch.dp_size, batch.micro_batch_size) != (p.dp_size, p.train_micro_batch_size):
        raise ConfigError(
            "invalid_argument",
            f"batch was materialized for dp_size={batch.dp_size}, micro_batch_size={batch.micro_batch_size}; "
            f"the trainer config says dp_size={p.dp_size}, train_micro_batch_size={p.train_micro_batch_size}",
        )
    if batch.optimizer_steps != 1:
        raise ConfigError(
            "invalid_argument",
            f"batch.optimizer_steps={batch.optimizer_steps}: one logical batch is exactly one optimizer step",
        )
    real = batch.parent_indices >= 0
    _check_versions(batch, cfg, real)
    if p.router_replay_enabled and batch.routed_experts is None and bool(real.any()):
        # NeMo-RL sets require_routed_experts from policy.router_replay.enabled: no routes is fatal, not a
        # silent fallback to the router (nemo-rl-semantics §1.6)
        raise ContractError(
            "missing_routed_experts",
            detail="policy.router_replay_enabled is on but no call of this batch recorded routed experts; start the "
            "model server with route capture or turn router replay off",
        )
    if p.router_replay_enabled and batch.routed_experts is not None:
        # the Gym path refuses each item without routed_experts under require_routed_experts (§1.6); the
        # -1 backfill of NeMo-RL's native path (§2.4) would replay the router where routes were expected
        for record in batch.logical:
            if record.route_less_turns:
                raise ContractError(
                    "missing_routed_experts",
                    rollout_id=record.rollout_id,
                    turn_id=record.route_less_turns[0],
                    detail=f"policy.router_replay_enabled is on but turn {record.route_less_turns[0]} of rollout "
                    f"{record.rollout_id!r} recorded no routed experts",
                )
    too_long = (batch.row_input_lengths > p.max_total_sequence_length) & real
    if bool(too_long.any()):
        row = int(too_long.nonzero()[0])
        raise ContractError(
            "sequence_too_long",
            rollout_id=batch.row_logical_rollout_id[row],
            detail=f"row {row} ({batch.row_physical_trace_id[row]}) has {int(batch.row_input_lengths[row])} tokens; "
            f"policy.max_total_sequence_length is {p.max_total_sequence_length}",
        )


def _check_versions(batch: TraceBatch, cfg: TrainerConfig, real: torch.Tensor) -> None:
    """Generation versions are mixed only in async GRPO with importance-sampling correction."""
    versions = sorted(set(batch.row_generation_policy_version[real].tolist()))
    if len(versions) <= 1:
        return
    if not cfg.grpo.async_grpo.enabled:
        raise ContractError(
            "mixed_policy_versions",
            detail=f"one sync optimizer batch mixes generation policy versions {versions}; sync GRPO trains on one "
            "version per batch",
        )
    if not cfg.loss_fn.use_importance_sampling_correction:
        raise ContractError(
            "mixed_policy_versions",
            detail=f"async batch mixes generation policy versions {versions} without importance-sampling correction "
            "(loss_fn.use_importance_sampling_correction)",
        )


__all__ = [
    "ADAM_BETAS",
    "ADAM_EPS",
    "PRECISIONS",
    "StepResult",
    "TrainState",
    "check_batch",
    "grpo_step",
    "init_train_state",
    "train_step",
]
