"""A second, independently structured GRPO train step with knobs for choices real trainers make differently.

Every knob is a way NeMo-RL's DTensor/Megatron workers, or a plain PyTorch loop, legitimately write the
same step (`tests/quality/correct_*.py` pick one each); the audit must pass all of them. The broken
variants (`tests/quality/*.py` in BROKEN) pick a knob that changes the step.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import torch
import torch.nn.functional as F

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.loss import clipped_pg_loss, combine_metrics, valid_counts
from compactsim.harness.pipeline.train_config import TrainerConfig, validate_physical_trace_training_config


@dataclass(frozen=True)
class Knobs:
    #: how gradients accumulate: one backward per micro-batch, or one backward of the rank's summed loss
    backward: Literal["per_microbatch", "per_rank_sum"] = "per_microbatch"
    #: micro-batches of a rank in the batch's order or reversed
    reverse_microbatches: bool = False
    #: the all-reduce: mean of per-rank copies (the reference), or every rank accumulating into one `.grad`
    #: with the loss not scaled by dp (a SUM all-reduce)
    #: (or, broken: the mean over only the ranks that hold a real row, as DDP's Join context divides by the ranks
    #: still joined; a rank of padding rows alone then counts for nothing)
    allreduce: Literal["mean_of_copies", "accumulate_sum", "mean_over_ranks_with_rows"] = "mean_of_copies"
    #: Megatron-style: backward of each micro-batch's un-normalised sum (the loss times N + 1e-8), gradients
    #: divided by N + 1e-8 once before clipping
    divide_once: bool = False
    #: logprobs by log_softmax+gather (policy.token_logprobs) or by -cross_entropy on the logits
    logprobs: Literal["gather", "cross_entropy"] = "gather"
    #: clipping: torch's clip_grad_norm_ (foreach False/True) or written out by hand
    clip: Literal["torch", "torch_foreach", "by_hand"] = "torch"
    #: zero_grad(set_to_none=...) and whether it runs before the step's backward or after optimizer.step()
    zero_grad_set_to_none: bool = True
    zero_grad_after_step: bool = False
    #: prev/ref logprobs in one forward over every row instead of the micro-batch layout
    prev_full_batch: bool = False
    #: report lr from scheduler.get_last_lr() instead of the param group
    lr_from_scheduler: bool = False
    #: with the SUM all-reduce, give a parameter no micro-batch reached a zero gradient (as FSDP's reduce-scatter and
    #: Megatron's grad buffers do) or leave it None (a plain PyTorch loop: AdamW then skips it)
    fill_missing_grads: bool = True


def _token_logprobs(policy, ids, images, routes, lengths, how: str) -> torch.Tensor:
    if how == "gather":
        return policy.token_logprobs(ids, images, routes, lengths)
    logits = policy(ids, images, routes).logits  # (B, S, V)
    b, s = ids.shape
    nll = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1).long(),
                          reduction="none").reshape(b, s - 1)
    lp = torch.cat([torch.zeros(b, 1, dtype=nll.dtype, device=nll.device), -nll], dim=1)
    lens = torch.as_tensor(lengths, device=lp.device).reshape(b, 1)
    return lp.masked_fill(torch.arange(s, device=lp.device)[None, :] >= lens, 0.0)


@torch.no_grad()
def _logprobs(policy, batch, microbatches, row_images, row_routes, knobs: Knobs) -> torch.Tensor:
    if not knobs.prev_full_batch:
        out = torch.zeros(batch.row_input_ids.shape, dtype=policy.dtype)
        for _, rows in microbatches:
            mb = T._slice(batch, rows, row_images, row_routes, policy.device)
            out[rows.start:rows.stop, : mb.width] = _token_logprobs(
                policy, mb.ids, mb.images, mb.routes, mb.lengths, knobs.logprobs).cpu()
        return out
    routes = None if row_routes is None else row_routes.to(policy.device)
    return _token_logprobs(policy, batch.row_input_ids.to(policy.device), list(row_images), routes,
                           batch.row_input_lengths.to(policy.device), knobs.logprobs).cpu()


def train_step(state: T.TrainState, batch: TraceBatch, cfg: TrainerConfig, knobs: Knobs) -> T.StepResult:
    cfg = validate_physical_trace_training_config(cfg)
    T.check_batch(batch, cfg)
    policy, device = state.policy, state.device
    step, trained_version = state.optimizer_steps, state.version
    loss_cfg = cfg.loss_fn
    row_images = T._row_images(batch, dtype=state.dtype, device=device)
    row_routes = batch.routed_experts if cfg.policy.router_replay_enabled else None
    n = valid_counts(batch.row_token_mask, batch.row_sample_mask)
    microbatches = [(rank, rows) for rank in range(batch.dp_size) for rows in batch.microbatch_rows(rank)]
    prev = _logprobs(policy, batch, microbatches, row_images, row_routes, knobs)
    ref = None
    if loss_cfg.reference_policy_kl_penalty != 0:
        ref = _logprobs(state.reference, batch, microbatches, row_images, row_routes, knobs)

    params = [p for p in policy.parameters() if p.requires_grad]
    if not knobs.zero_grad_after_step:
        state.optimizer.zero_grad(set_to_none=knobs.zero_grad_set_to_none)
    dp_scale = 1.0 if knobs.allreduce == "accumulate_sum" else float(batch.dp_size)
    if knobs.divide_once:
        dp_scale *= n.tokens + 1e-8
    rank_grads: list[list[torch.Tensor]] = []
    mb_metrics: list[dict[str, float]] = []
    for rank in range(batch.dp_size):
        rows_of_rank = list(batch.microbatch_rows(rank))
        if knobs.reverse_microbatches:
            rows_of_rank.reverse()
        pending = []
        for rows in rows_of_rank:
            mb = T._slice(batch, rows, row_images, row_routes, device)
            mb_curr = _token_logprobs(policy, mb.ids, mb.images, mb.routes, mb.lengths, knobs.logprobs)
            out = clipped_pg_loss(
                loss_cfg, curr_logprobs=mb_curr, token_mask=mb.token_mask, sample_mask=mb.sample_mask,
                advantages=mb.advantages, prev_logprobs=prev[rows.start:rows.stop, : mb.width].to(device),
                generation_logprobs=mb.generation_logprobs,
                reference_logprobs=None if ref is None else ref[rows.start:rows.stop, : mb.width].to(device),
                global_valid_tokens=n.tokens, global_valid_seqs=n.seqs,
            )
            if knobs.backward == "per_microbatch":
                (out.loss * dp_scale).backward()
            else:
                pending.append(out.loss)
            metrics = dict(out.metrics)
            mb_metrics.append(metrics)
        if pending:
            (torch.stack(pending).sum() * dp_scale).backward()
        if knobs.allreduce != "accumulate_sum":
            rank_grads.append(T._take_grads(params))
    if knobs.allreduce != "accumulate_sum":
        ranks = batch.dp_size
        if knobs.allreduce == "mean_over_ranks_with_rows":
            ranks = sum(1 for rank in range(batch.dp_size)
                        if any(int(batch.parent_indices[r]) >= 0 for rows in batch.microbatch_rows(rank) for r in rows))
        for i, p in enumerate(params):
            p.grad = torch.stack([g[i] for g in rank_grads]).sum(0) / ranks
    elif knobs.fill_missing_grads:
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
    if knobs.divide_once:
        for p in params:
            if p.grad is not None:
                p.grad.div_(n.tokens + 1e-8)

    max_norm = cfg.policy.max_grad_norm
    if knobs.clip == "torch" or max_norm is None:
        grad_norm = T._clip_grad_norm(params, max_norm)
    elif knobs.clip == "torch_foreach":
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True))
    else:  # Megatron's clip_grad_norm: total L2 norm, then scale by max/(norm+1e-6) only when that is < 1
        grads = [p.grad for p in params if p.grad is not None]
        total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        coeff = max_norm / (total + 1e-6)
        if coeff < 1.0:
            for g in grads:
                g.mul_(coeff)
        grad_norm = float(total)

    lr = float(state.scheduler.get_last_lr()[0]) if knobs.lr_from_scheduler else float(state.optimizer.param_groups[0]["lr"])
    updates_before, epoch_before = T._optimizer_updates(state.optimizer), state.scheduler_steps
    state.optimizer.step()
    if knobs.zero_grad_after_step:
        state.optimizer.zero_grad(set_to_none=knobs.zero_grad_set_to_none)
    state.optimizer_steps += 1
    state.scheduler.step()
    state.version += 1
    updates = T._optimizer_updates(state.optimizer) - updates_before
    increments = state.scheduler_steps - epoch_before

    from compactsim.harness.core import metrics as M
    from compactsim.harness.core.artifacts import artifact_from_batch
    from compactsim.harness.pipeline.batch_metrics import step_metrics

    train_metrics = {
        **combine_metrics(mb_metrics), M.GRAD_NORM: grad_norm, M.LR: lr, M.GLOBAL_VALID_TOKENS: n.tokens,
        M.GLOBAL_VALID_SEQS: n.seqs, M.TRAINED_POLICY_VERSION: trained_version,
        M.OPTIMIZER_STEP_COUNT: state.optimizer_steps, M.SCHEDULER_STEP_COUNT: state.scheduler_steps,
        M.OPTIMIZER_STEPS: updates, M.SCHEDULER_INCREMENTS: increments,
    }
    metrics = step_metrics(batch, train_metrics)
    artifact = artifact_from_batch(batch, step=step, trained_policy_version=trained_version, prev_logprobs=prev,
                                   reference_logprobs=ref, routes_used=row_routes, metrics=metrics,
                                   optimizer_steps=updates, scheduler_increments=increments)
    return T.StepResult(step=step, batch=batch, metrics=metrics, artifact=artifact, prev_logprobs=prev,
                        trained_version=trained_version, new_version=state.version)
