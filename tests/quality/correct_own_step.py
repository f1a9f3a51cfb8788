"""A CORRECT backend: a GRPO train step written from scratch (own loss, own micro-batching, own clip), with options.

Written from shared/reference/nemo-rl-semantics.md §4 and README "Checking another trainer" only; it does not
call compactsim's loss or trainer helpers (only `check_batch`, `step_metrics` and `artifact_from_batch`, which the
README names). The default options are the plainest PyTorch way to write the step; the other
`tests/quality/correct_*.py` files of this family (see each one's docstring) pick one legitimate alternative each,
the way NeMo-RL, veRL, OpenRLHF, TRL or a plain loop write it:

- layout: the batch's rank/micro-batch layout; the whole batch in one forward/backward; one row per micro-batch
  (padding rows skipped: they contribute exactly zero); rows sorted by length and bucketed (veRL/OpenRLHF
  "dynamic batch" style); rows dealt round-robin to the dp ranks (veRL's seqlen balancing). The loss normaliser is
  always the global count Σ sample_mask·token_mask[:, 1:] + 1e-8, so every partition sums to the same gradient;
- grad: `.backward()` accumulation; `torch.autograd.grad` into a separate buffer then assigned to `.grad`;
  backward of the un-normalised sum with per-parameter hooks dividing by the global count;
- logprobs: log_softmax + gather; logit − logsumexp (flash-attn / veRL form); log_softmax in float64 kept float64;
- KL: NeMo-RL's exp(x) − 1 − x; or expm1(x) − x with the score-function weight written 1 + lp − sg(lp);
- clip: clip_grad_norm_; or get_total_norm(error_if_nonfinite=True) + clip_grads_with_norm_;
- accumulate: gradients accumulated in float64 buffers (Megatron's fp32 main_grad idea) and cast back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from compactsim.harness.core import metrics as M
from compactsim.harness.core.artifacts import artifact_from_batch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.batch_metrics import step_metrics
from compactsim.harness.pipeline.trainer import StepResult, check_batch
from compactsim.harness.pipeline.train_config import validate_physical_trace_training_config

SCENARIO = "layout-dp2-kl-steps-clip-binds"
EPS = 1e-8


@dataclass(frozen=True)
class Opts:
    layout: str = "reference"  # reference | whole | rows | sorted | round_robin
    grad: str = "backward"  # backward | autograd_grad | hooks_sum
    logprobs: str = "log_softmax"  # log_softmax | logsumexp | f64
    kl: str = "standard"  # standard | expm1
    clip: str = "torch"  # torch | split
    accumulate_f64: bool = False
    maximize: bool = False  # AdamW(maximize=True) stepping on the negated loss
    fill_none_grads: bool = False  # give never-reached parameters a zero gradient (FSDP/Megatron buffers)
    zero_set_to_none: bool = True
    nemo_float_adv_metrics: bool = False  # log advantages/* as NeMo-RL's driver does: advantages.float() (float32)
    full_width: bool = False  # run every micro-batch at the batch's padded width S (as NeMo-RL does) not the longest row


def _groups(batch, opts: Opts) -> list[list[list[int]]]:
    """Ranks → micro-batches → row indices. The gradient is the rank-mean × dp (or, with one rank, the sum)."""
    real = [r for r in range(batch.num_rows) if int(batch.parent_indices[r]) >= 0]
    mbs = batch.micro_batch_size
    if opts.layout == "reference":
        return [[list(rows) for rows in batch.microbatch_rows(k)] for k in range(batch.dp_size)]
    if opts.layout == "whole":
        return [[list(range(batch.num_rows))]]
    if opts.layout == "rows":
        return [[[r] for r in real]]
    if opts.layout == "sorted":
        order = sorted(real, key=lambda r: (-int(batch.row_input_lengths[r]), r))
        return [[order[i:i + mbs] for i in range(0, len(order), mbs)]] if order else [[[0]]]
    if opts.layout == "round_robin":
        ranks: list[list[int]] = [[] for _ in range(batch.dp_size)]
        for i, r in enumerate(range(batch.num_rows)):
            ranks[i % batch.dp_size].append(r)
        return [[rows[i:i + mbs] for i in range(0, len(rows), mbs)] for rows in ranks]
    raise ValueError(opts.layout)


def _token_logprobs(policy, ids, images, routes, lengths, how: str, cdtype) -> torch.Tensor:
    """(B, S) own-position logprobs (column 0 and columns ≥ length are 0), in the loss dtype."""
    logits = policy(ids, images, routes).logits[:, :-1]
    nxt = ids[:, 1:, None]
    if how == "log_softmax":
        lp = logits.to(cdtype).log_softmax(-1).gather(-1, nxt)[..., 0]
    elif how == "logsumexp":
        lg = logits.to(cdtype)
        lp = lg.gather(-1, nxt)[..., 0] - torch.logsumexp(lg, dim=-1)
    elif how == "f64":
        lp = logits.to(torch.float64).log_softmax(-1).gather(-1, nxt)[..., 0]
    else:
        raise ValueError(how)
    b, s = ids.shape
    lp = torch.cat([torch.zeros(b, 1, dtype=lp.dtype, device=lp.device), lp], dim=1)
    pos = torch.arange(s, device=lp.device)[None, :]
    return torch.where(pos < lengths[:, None], lp, torch.zeros((), dtype=lp.dtype, device=lp.device))


def _kl(lp, ref, lc, form: str):
    """β-less per-token KL with NeMo-RL's input clamp (weight detached where it bites) and output clamp."""
    x = ref - lp
    bites = torch.zeros_like(x, dtype=torch.bool)
    if lc.kl_input_clamp_value is not None:
        c = float(lc.kl_input_clamp_value)
        bites = x.abs() > c
        x = x.clamp(-c, c)
    kind = lc.reference_policy_kl_type
    if form == "standard":
        k = {"k1": lambda: -x, "k2": lambda: 0.5 * x * x, "k3": lambda: torch.exp(x) - 1 - x}[kind]()
        w = torch.exp(lp - lp.detach())
    else:
        k = {"k1": lambda: x.neg(), "k2": lambda: x.square() / 2, "k3": lambda: torch.expm1(x) - x}[kind]()
        w = 1 + (lp - lp.detach())  # value 1, gradient d lp: the same as exp(lp - sg(lp)) to first order and exactly
    w = torch.where(bites, w.detach(), w)
    out = w * k
    if lc.kl_output_clamp_value is not None:
        c = float(lc.kl_output_clamp_value)
        out = out.clamp(-c, c)
    return out


def _is_weights(prev, gen, lc):
    w = torch.nan_to_num(torch.exp(prev - gen), nan=0.0, posinf=0.0, neginf=0.0)
    kind = lc.truncated_importance_sampling_type
    oob = None
    if kind == "tis":
        lo = 0.0 if lc.truncated_importance_sampling_ratio_min is None else lc.truncated_importance_sampling_ratio_min
        hi = lc.truncated_importance_sampling_ratio
        oob = (w > hi) | (w < lo)
        w = w.clamp(lo, hi)
    elif kind == "icepop":
        lo, hi = lc.truncated_importance_sampling_ratio_min, lc.truncated_importance_sampling_ratio
        inb = (w >= lo) & (w <= hi)
        oob = ~inb
        w = torch.where(inb, w, torch.zeros_like(w))
    elif kind is not None:
        raise NotImplementedError(kind)  # seq-mask-tis: refused on the physical-trace path
    return w, oob


def _ratios(lp, prev, lc):
    if lc.disable_ppo_ratio:
        return lp, lp
    if lc.force_on_policy_ratio:
        r = torch.exp(lp - lp.detach())
        return r, r
    r = torch.exp(lp - prev)
    return r, r.clamp(1 - lc.ratio_clip_min, 1 + lc.ratio_clip_max)


def own_train_step(state, batch, cfg, opts: Opts = Opts()) -> StepResult:
    cfg = validate_physical_trace_training_config(cfg)
    check_batch(batch, cfg)
    policy, device, wdtype = state.policy, state.device, state.dtype
    cdtype = torch.float64 if opts.logprobs == "f64" else torch.promote_types(wdtype, torch.float32)
    lc, pc = cfg.loss_fn, cfg.policy
    step, trained_version = state.optimizer_steps, state.version
    R, S = batch.num_rows, batch.seq_len
    beta = float(lc.reference_policy_kl_penalty)

    ids_all = batch.row_input_ids.to(device=device, dtype=torch.long)
    len_all = batch.row_input_lengths.to(device=device, dtype=torch.long)
    routes_all = batch.routed_experts.to(device) if pc.router_replay_enabled and batch.routed_experts is not None else None
    cache: dict[int, torch.Tensor] = {}
    images_all = []
    for row in batch.row_pixel_values:
        images_all.append([cache.setdefault(id(px), px.to(device=device, dtype=wdtype)) for px in row])
    tm_all = batch.row_token_mask[:, 1:].to(device=device, dtype=cdtype)
    sm_all = batch.row_sample_mask.to(device=device, dtype=cdtype)
    m_all = tm_all * sm_all[:, None]  # (R, S-1) trained positions
    n_tok = float(m_all.sum().item())
    n_seq = float(sm_all.sum().item())
    denom = n_tok + EPS
    adv_all = batch.row_advantages[:, 1:].to(device=device, dtype=cdtype)
    gen_all = batch.row_generation_logprobs[:, 1:].to(device=device, dtype=cdtype)

    layout = _groups(batch, opts)

    def inputs(rows: list[int]):
        idx = torch.as_tensor(rows, dtype=torch.long, device=device)
        width = S if opts.full_width else max(2, int(len_all[idx].max()))
        return (idx, ids_all[idx, :width], [images_all[r] for r in rows],
                None if routes_all is None else routes_all[idx, :width], len_all[idx], width)

    # prev / reference logprobs under the weights before the step (no grad), in the training layout
    prev_all = torch.zeros(R, S - 1, dtype=cdtype, device=device)
    ref_all = torch.zeros(R, S - 1, dtype=cdtype, device=device) if beta != 0 else None
    with torch.no_grad():
        for rank in layout:
            for rows in rank:
                idx, ids, imgs, routes, lens, w = inputs(rows)
                prev_all[idx, : w - 1] = _token_logprobs(policy, ids, imgs, routes, lens, opts.logprobs, cdtype)[:, 1:]
                if ref_all is not None:
                    ref_all[idx, : w - 1] = _token_logprobs(state.reference, ids, imgs, routes, lens, opts.logprobs,
                                                            cdtype)[:, 1:]

    params = [p for p in policy.parameters() if p.requires_grad]
    state.optimizer.zero_grad(set_to_none=opts.zero_set_to_none)
    for p in params:  # the gradient of this step only, whatever zero_grad left
        if p.grad is not None:
            p.grad.zero_()
    ranks = len(layout)
    rank_bufs: list[list[torch.Tensor | None]] = []
    curr_all = torch.zeros(R, S - 1, dtype=cdtype, device=device)
    loss_sum = actor_sum = kl_sum = 0.0
    hooks = []
    if opts.grad == "hooks_sum":
        hooks = [p.register_hook(lambda g: g / denom) for p in params]
    try:
        for rank in layout:
            buf: list[torch.Tensor | None] = [None] * len(params)
            for rows in rank:
                idx, ids, imgs, routes, lens, w = inputs(rows)
                lp = _token_logprobs(policy, ids, imgs, routes, lens, opts.logprobs, cdtype)[:, 1:]
                m = m_all[idx, : w - 1]
                keep = m != 0
                zero = torch.zeros((), dtype=cdtype, device=device)
                lp_k = torch.where(keep, lp, zero)
                curr_all[idx, : w - 1] = lp_k.detach()
                a = torch.where(keep, adv_all[idx, : w - 1], zero)
                g = torch.where(keep, gen_all[idx, : w - 1], zero)
                pv = lp_k.detach() if lc.force_on_policy_ratio else torch.where(keep, prev_all[idx, : w - 1], zero)
                r, rc = _ratios(lp_k, pv, lc)
                pg = torch.maximum(-a * r, -a * rc)
                if lc.ratio_clip_c is not None:
                    pg = torch.where(a < 0, torch.minimum(pg, -a * lc.ratio_clip_c), pg)
                wts, _ = _is_weights(pv, g, lc)
                if not lc.use_importance_sampling_correction:
                    wts = torch.ones_like(wts)
                actor_tok_sum = (wts * pg * m).sum()
                total = actor_tok_sum
                kl_tok_sum = None
                if ref_all is not None:
                    rf = torch.where(keep, ref_all[idx, : w - 1], zero)
                    kl_tok_sum = (beta * _kl(lp_k, rf, lc, opts.kl) * m).sum()
                    total = total + kl_tok_sum
                actor_sum += float(actor_tok_sum.detach()) / denom
                if kl_tok_sum is not None:
                    kl_sum += float(kl_tok_sum.detach()) / denom
                # the microbatch's share of the global token mean (the hooks divide instead, in hooks_sum)
                loss = total if opts.grad == "hooks_sum" else total / denom
                loss_sum += float(total.detach()) / denom
                scale = float(ranks) * (-1.0 if opts.maximize else 1.0)  # x dp undoes the mean all-reduce
                if opts.grad == "autograd_grad":
                    grads = torch.autograd.grad(loss * scale, params, allow_unused=True)
                    for j, gr in enumerate(grads):
                        if gr is None:
                            continue
                        gr = gr.to(torch.float64) if opts.accumulate_f64 else gr
                        buf[j] = gr.clone() if buf[j] is None else buf[j] + gr
                else:
                    (loss * scale).backward()
            if opts.grad != "autograd_grad":
                for j, p in enumerate(params):
                    if p.grad is not None:
                        buf[j] = p.grad.detach().to(torch.float64 if opts.accumulate_f64 else p.grad.dtype).clone()
                        p.grad = None
            rank_bufs.append(buf)
    finally:
        for h in hooks:
            h.remove()

    # all-reduce: mean over ranks
    for j, p in enumerate(params):
        parts = [b[j] for b in rank_bufs if b[j] is not None]
        if not parts:
            p.grad = torch.zeros_like(p) if opts.fill_none_grads else None
            continue
        total = parts[0].clone()
        for x in parts[1:]:
            total = total + x
        p.grad = (total / ranks).to(p.dtype)

    grads = [p.grad for p in params if p.grad is not None]
    max_norm = pc.max_grad_norm
    if opts.clip == "split":
        norm = torch.nn.utils.get_total_norm(grads, norm_type=2.0, error_if_nonfinite=True, foreach=False)
        if max_norm is not None:
            torch.nn.utils.clip_grads_with_norm_(params, max_norm, norm, foreach=False)
        grad_norm = float(norm)
    elif max_norm is not None:
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    else:
        grad_norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.to(torch.float64))
                                                                 for g in grads])))

    lr = float(state.optimizer.param_groups[0]["lr"])
    def counter():
        vals = [s.get("step", 0) for s in state.optimizer.state.values()]
        return max((int(v) for v in vals), default=0)
    before, epoch_before = counter(), int(state.scheduler.last_epoch)
    state.optimizer.step()
    state.scheduler.step()
    state.optimizer_steps += 1
    state.version += 1
    updates, increments = counter() - before, int(state.scheduler.last_epoch) - epoch_before

    with torch.no_grad():
        m = m_all
        keep = m != 0
        pv = curr_all if lc.force_on_policy_ratio else torch.where(keep, prev_all, torch.zeros((), dtype=cdtype))
        g = torch.where(keep, gen_all, torch.zeros((), dtype=cdtype))
        r, rc = _ratios(curr_all, pv, lc)
        wts, oob = _is_weights(pv, g, lc)

        def mean(v):
            return float((v * m).sum() / denom)

        any_tok = bool(keep.any())
        train_metrics = {
            "loss": loss_sum,
            "actor_loss": actor_sum,
            "kl_penalty": kl_sum / beta if beta != 0 else 0.0,
            M.TOKEN_MULT_PROB_ERROR: float((m * torch.exp((g - pv).abs() * m)).sum() / denom),
            "probs_ratio": mean(r),
            "probs_ratio_clamped": mean(rc),
            "probs_ratio_min": float(r[keep].min()) if any_tok else math.inf,
            "probs_ratio_max": float(r[keep].max()) if any_tok else -math.inf,
            "sampling_importance_ratio": mean(wts),
            "approx_entropy": -mean(torch.exp(curr_all - g) * curr_all),
            "num_valid_samples": n_seq,
            M.GRAD_NORM: grad_norm,
            M.LR: lr,
            M.GLOBAL_VALID_TOKENS: n_tok,
            M.GLOBAL_VALID_SEQS: n_seq,
            M.TRAINED_POLICY_VERSION: trained_version,
            M.OPTIMIZER_STEPS: updates,
            M.SCHEDULER_INCREMENTS: increments,
            M.OPTIMIZER_STEP_COUNT: state.optimizer_steps,
            M.SCHEDULER_STEP_COUNT: int(state.scheduler.last_epoch),
        }
        if oob is not None:
            train_metrics["is_oob_ratio"] = mean(oob.to(cdtype))
    metrics = step_metrics(batch, train_metrics)
    if opts.nemo_float_adv_metrics:
        metrics.update(_nemo_advantage_metrics(batch))
    prev_host = torch.zeros(R, S, dtype=wdtype)
    prev_host[:, 1:] = prev_all.detach().cpu().to(wdtype)
    ref_host = None
    if ref_all is not None:
        ref_host = torch.zeros(R, S, dtype=wdtype)
        ref_host[:, 1:] = ref_all.detach().cpu().to(wdtype)
    artifact = artifact_from_batch(batch, step=step, trained_policy_version=trained_version, prev_logprobs=prev_host,
                                   reference_logprobs=ref_host,
                                   routes_used=None if routes_all is None else routes_all.detach().cpu(),
                                   metrics=metrics, optimizer_steps=updates, scheduler_increments=increments)
    return StepResult(step=step, batch=batch, metrics=metrics, artifact=artifact, prev_logprobs=prev_host,
                      trained_version=trained_version, new_version=state.version)


def _nemo_advantage_metrics(batch) -> dict[str, float]:
    """NeMo-RL's driver (semantics §3.7): `advantages/sum` = advantages.float().sum() over the unmasked, broadcast
    [B, S] tensor before clipping; `advantages/mean|min|max` over token_loss_mask == 1 positions after clipping."""
    R, S = batch.row_input_ids.shape
    unclipped = torch.zeros(R, S, dtype=torch.float64)
    for r in range(R):
        p = int(batch.parent_indices[r])
        if p >= 0:
            unclipped[r] = batch.logical[p].logged_advantage
    adv = batch.row_advantages.float()
    mask = batch.row_token_mask.float()
    on = mask == 1
    out = {M.ADVANTAGES_SUM: float(unclipped.float().sum())}
    if bool(on.any()):
        out[M.ADVANTAGES_MEAN] = float((adv * mask).sum() / mask.sum())
        out[M.ADVANTAGES_MIN] = float(adv[on].min())
        out[M.ADVANTAGES_MAX] = float(adv[on].max())
    return out


class Backend(ReferenceBackend):
    name = "correct-own-step"
    opts = Opts()

    def train_step(self, state, batch, cfg):
        return own_train_step(state, batch, cfg, self.opts)
