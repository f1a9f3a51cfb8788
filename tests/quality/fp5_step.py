"""False-positive hunt 5: a GRPO train step with its own loss, written with choices other trainers make.

Not a backend itself: `tests/quality/fp5_*.py` pick options. Written from shared/reference/nemo-rl-semantics.md §4
and README "Checking another trainer". Uses compactsim only for `check_batch`, the micro-batch layout of the batch,
`step_metrics` and `artifact_from_batch` (via tests/quality/_fp_common.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from compactsim.harness.core import metrics as M
from compactsim.harness.pipeline.trainer import check_batch
from compactsim.harness.pipeline.train_config import validate_physical_trace_training_config
from tests.quality._fp_common import EPS, finish, row_images, step_once


@dataclass(frozen=True)
class Opts:
    #: importance weights: "log" exp(prev - gen) or "ratio" exp(prev) / exp(gen)
    is_space: str = "log"
    #: per micro-batch loss: "global" Σ/(N+eps), or "share" the local masked mean times n_mb/(N+eps) (HF's
    #: num_items_in_batch / TRL style weighting of local means)
    mb_norm: str = "global"
    #: logprobs: "gather" log_softmax+gather, "categorical" torch.distributions.Categorical.log_prob,
    #: "ce_chunks" -cross_entropy over chunks of positions
    logprobs: str = "gather"
    #: prev/ref: "detached" (the training forward, detached) or "eval_pass" (a separate inference_mode pass, eval())
    prev: str = "detached"
    #: grad norm: "torch" clip_grad_norm_(foreach=True, error_if_nonfinite=True) or "flat" one concatenated vector
    norm: str = "torch"
    #: ranks in order or reversed; micro-batches within a rank in order or reversed
    reverse_ranks: bool = False
    #: KL k3 written as ratio - 1 - log(ratio) with ratio = exp(ref - lp)
    kl_ratio_form: bool = False
    #: sort each (token, layer) route row's K expert ids before replaying them (a routing-map replay is order-free)
    sort_routes: bool = False
    #: report the sorted routes as the routes used
    report_sorted_routes: bool = False
    #: advantages broadcast per token from the per-row value after masking (A_row[:, None] * mask)
    adv_from_row_value: bool = False


def _lp(policy, ids, images, routes, lengths, how: str) -> torch.Tensor:
    """(B, S) own-position logprobs; column 0 and columns >= length are 0."""
    logits = policy(ids, images, routes).logits[:, :-1]
    tgt = ids[:, 1:].long()
    if how == "gather":
        lp = logits.log_softmax(-1).gather(-1, tgt[..., None])[..., 0]
    elif how == "categorical":
        lp = torch.distributions.Categorical(logits=logits, validate_args=False).log_prob(tgt)
    elif how == "ce_chunks":
        b, s1, v = logits.shape
        parts = []
        for a in range(0, s1, 5):
            z = logits[:, a:a + 5]
            parts.append(-F.cross_entropy(z.reshape(-1, v), tgt[:, a:a + 5].reshape(-1), reduction="none").reshape(b, -1))
        lp = torch.cat(parts, dim=1)
    else:
        raise ValueError(how)
    b, s = ids.shape
    lp = torch.cat([lp.new_zeros(b, 1), lp], dim=1)
    pos = torch.arange(s, device=lp.device)[None, :]
    return torch.where(pos < lengths[:, None], lp, lp.new_zeros(()))


def _kl(lp, ref, lc, ratio_form: bool):
    x = ref - lp
    bites = torch.zeros_like(x, dtype=torch.bool)
    if lc.kl_input_clamp_value is not None:
        c = float(lc.kl_input_clamp_value)
        bites = x.abs() > c
        x = x.clamp(-c, c)
    kind = lc.reference_policy_kl_type
    if kind == "k1":
        k = -x
    elif kind == "k2":
        k = 0.5 * x * x
    elif ratio_form:
        r = torch.exp(x)
        k = (r - 1) - torch.log(r)
    else:
        k = torch.exp(x) - 1 - x
    w = torch.exp(lp - lp.detach())
    w = torch.where(bites, w.detach(), w)
    out = w * k
    if lc.kl_output_clamp_value is not None:
        c = float(lc.kl_output_clamp_value)
        out = out.clamp(-c, c)
    return out


def _loss(lc, curr, prev, gen, ref, adv, tok_mask, sample_mask, n_tok: float, opts: Opts):
    """(loss tensor, metric dict) of one micro-batch; everything in the next-token frame (B, S-1)."""
    dt = curr.dtype
    m = tok_mask.to(dt) * sample_mask.to(dt)[:, None]
    keep = m != 0
    z = curr.new_zeros(())
    curr = torch.where(keep, curr, z)
    prev = torch.where(keep, prev, z).detach()
    gen = torch.where(keep, gen, z)
    adv = torch.where(keep, adv, z)
    if ref is not None:
        ref = torch.where(keep, ref, z)
    n_local = float(m.sum())
    denom = n_tok + EPS
    if opts.mb_norm == "global":
        def gmean(v):
            return (v * m).sum() / denom
    else:  # local masked mean, weighted by this micro-batch's share of the global count
        def gmean(v):
            if n_local == 0:
                return (v * m).sum() * 0.0
            return (v * m).sum() / n_local * (n_local / denom)

    if lc.force_on_policy_ratio:
        ratio = torch.exp(curr - curr.detach())
        clamped = ratio
    elif lc.disable_ppo_ratio:
        ratio = clamped = curr
    else:
        ratio = torch.exp(curr - prev)
        clamped = ratio.clamp(1 - lc.ratio_clip_min, 1 + lc.ratio_clip_max)
    pg = -torch.minimum(adv * ratio, adv * clamped)
    if lc.ratio_clip_c is not None:
        pg = torch.where(adv < 0, torch.minimum(pg, -adv * lc.ratio_clip_c), pg)

    if opts.is_space == "log":
        w = torch.exp(prev - gen)
    else:
        w = torch.exp(prev) / torch.exp(gen)
    w = torch.nan_to_num(w, nan=0.0, posinf=0.0, neginf=0.0).detach()
    oob = None
    kind = lc.truncated_importance_sampling_type
    if kind == "tis":
        hi = float(lc.truncated_importance_sampling_ratio)
        lo = lc.truncated_importance_sampling_ratio_min
        if lo is None:  # upper bound only: torch.minimum, never a lower clamp
            oob = gmean((w > hi).to(dt))
            w = torch.minimum(w, torch.full_like(w, hi))
        else:
            oob = gmean(((w > hi) | (w < lo)).to(dt))
            w = torch.minimum(torch.maximum(w, torch.full_like(w, lo)), torch.full_like(w, hi))
    elif kind == "icepop":
        hi, lo = float(lc.truncated_importance_sampling_ratio), float(lc.truncated_importance_sampling_ratio_min)
        inb = (w >= lo) & (w <= hi)
        oob = gmean((~inb).to(dt))
        w = w * inb.to(dt)
    elif kind is not None:
        raise NotImplementedError(kind)
    used = w if lc.use_importance_sampling_correction else torch.ones_like(w)
    actor = gmean(used * pg)
    beta = lc.reference_policy_kl_penalty
    kl = gmean(beta * _kl(curr, ref, lc, opts.kl_ratio_form)) if beta != 0 else z
    loss = actor + kl

    with torch.no_grad():
        kt = lc.reference_policy_kl_type

        def kle(lp, r):
            x = r - lp
            return {"k1": lambda: -x, "k2": lambda: 0.5 * x * x, "k3": lambda: torch.exp(x) - 1 - x}[kt]()

        mix = torch.logaddexp(prev, gen) - math.log(2.0)
        a, b = prev - mix, gen - mix
        rk, ck = ratio.detach()[keep], clamped.detach()[keep]
        empty = rk.numel() == 0
        met = {
            "loss": loss.item(), "actor_loss": actor.item(), "kl_penalty": kl.item() / beta if beta != 0 else 0.0,
            "probs_ratio": gmean(ratio.detach()).item(), "probs_ratio_clamped": gmean(clamped.detach()).item(),
            "probs_ratio_min": math.inf if empty else rk.min().item(),
            "probs_ratio_max": -math.inf if empty else rk.max().item(),
            "probs_ratio_clamped_min": math.inf if empty else ck.min().item(),
            "probs_ratio_clamped_max": -math.inf if empty else ck.max().item(),
            "token_mult_prob_error": gmean(torch.exp((gen - prev).abs() * m)).item(),
            "gen_kl_error": gmean(kle(gen, prev)).item(), "policy_kl_error": gmean(kle(prev, gen)).item(),
            "js_divergence_error": gmean(0.5 * (torch.exp(a) - a - 1) + 0.5 * (torch.exp(b) - b - 1)).item(),
            "sampling_importance_ratio": gmean(w).item(),
            "approx_entropy": -gmean(torch.exp(curr - gen) * curr).item(),
            "num_valid_samples": float(sample_mask.to(torch.float64).sum()),
        }
        if oob is not None:
            met["is_oob_ratio"] = oob.item()
    return loss, met


def _combine(mets):
    out = {}
    for k in mets[0]:
        vals = [d[k] for d in mets]
        out[k] = min(vals) if k.endswith("_min") else max(vals) if k.endswith("_max") else sum(vals)
    return out


def train_step(state, batch, cfg, opts: Opts):
    cfg = validate_physical_trace_training_config(cfg)
    check_batch(batch, cfg)
    policy, device = state.policy, state.device
    lc = cfg.loss_fn
    step, trained_version = state.optimizer_steps, state.version
    imgs = row_images(batch, state.dtype, device)
    replay = cfg.policy.router_replay_enabled
    routes_all = batch.routed_experts if replay else None
    routes_fwd = routes_all
    if routes_all is not None and opts.sort_routes:
        unset = (routes_all == -1).all(dim=-1, keepdim=True)
        routes_fwd = torch.where(unset, routes_all, routes_all.sort(dim=-1).values)
    tm = batch.row_token_mask
    sm = batch.row_sample_mask
    n_tok = float((tm[:, 1:].to(torch.float64) * sm.to(torch.float64)[:, None]).sum())
    n_seq = float(sm.to(torch.float64).sum())

    ranks = list(range(batch.dp_size))
    if opts.reverse_ranks:
        ranks.reverse()
    layout = [(k, rows) for k in ranks for rows in batch.microbatch_rows(k)]

    def mb_inputs(rows):
        a, b = rows.start, rows.stop
        w = max(2, int(batch.row_input_lengths[a:b].max()))
        r = None if routes_fwd is None else routes_fwd[a:b, :w].to(device)
        return (w, batch.row_input_ids[a:b, :w].to(device), list(imgs[a:b]), r, batch.row_input_lengths[a:b].to(device))

    S = batch.row_input_ids.shape[1]
    prev_all = torch.zeros(batch.row_input_ids.shape, dtype=policy.dtype)
    ref_all = None
    if opts.prev == "eval_pass":
        was = policy.training
        policy.eval()
        with torch.inference_mode():
            for _, rows in layout:
                w, ids, im, r, ln = mb_inputs(rows)
                prev_all[rows.start:rows.stop, :w] = _lp(policy, ids, im, r, ln, opts.logprobs).cpu()
        policy.train(was)
        prev_all = prev_all.clone()
    if lc.reference_policy_kl_penalty != 0:
        ref_all = torch.zeros(batch.row_input_ids.shape, dtype=policy.dtype)
        with torch.inference_mode():
            for _, rows in layout:
                w, ids, im, r, ln = mb_inputs(rows)
                ref_all[rows.start:rows.stop, :w] = _lp(state.reference, ids, im, r, ln, opts.logprobs).cpu()
        ref_all = ref_all.clone()

    params = [p for p in policy.parameters() if p.requires_grad]
    state.optimizer.zero_grad(set_to_none=True)
    per_rank = {}
    mets = []
    for k in ranks:
        for rows in batch.microbatch_rows(k):
            a, b = rows.start, rows.stop
            w, ids, im, r, ln = mb_inputs(rows)
            curr = _lp(policy, ids, im, r, ln, opts.logprobs)
            if opts.prev == "detached":
                prev_all[a:b, :w] = curr.detach().cpu()
            prev = prev_all[a:b, :w].to(device)
            ref = None if ref_all is None else ref_all[a:b, :w].to(device)
            if opts.adv_from_row_value:
                # one value per row: its logical rollout's advantage (0 for a padding row)
                by_index = {rec.index: rec.advantage for rec in batch.logical}
                row_adv = torch.tensor([by_index[int(i)] if int(i) >= 0 else 0.0
                                        for i in batch.parent_indices[a:b]], dtype=batch.row_advantages.dtype)
                adv = (row_adv[:, None] * tm[a:b, :w].to(row_adv.dtype)).to(device)
            else:
                adv = batch.row_advantages[a:b, :w].to(device)
            loss, met = _loss(lc, curr[:, 1:], prev[:, 1:], batch.row_generation_logprobs[a:b, 1:w].to(device),
                              None if ref is None else ref[:, 1:], adv[:, 1:], tm[a:b, 1:w].to(device),
                              sm[a:b].to(device), n_tok, opts)
            loss.backward()  # gradient of this rank's share; the rank copies are summed (SUM all-reduce)
            mets.append(met)
        per_rank[k] = [torch.zeros_like(p) if p.grad is None else p.grad.detach().clone() for p in params]
        for p in params:
            p.grad = None
    for i, p in enumerate(params):
        p.grad = sum(per_rank[k][i] for k in sorted(per_rank))

    mx = cfg.policy.max_grad_norm
    if opts.norm == "flat":
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        total = torch.linalg.vector_norm(flat)
        if mx is not None:
            coef = torch.clamp(mx / (total + 1e-6), max=1.0)
            for p in params:
                p.grad.mul_(coef)
        grad_norm = float(total)
    elif mx is None:
        grad_norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params])))
    else:
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, mx, foreach=True, error_if_nonfinite=True))

    lr = float(state.optimizer.param_groups[0]["lr"])
    updates, increments = step_once(state)
    tmets = {**_combine(mets), M.GRAD_NORM: grad_norm, M.LR: lr, M.GLOBAL_VALID_TOKENS: n_tok,
             M.GLOBAL_VALID_SEQS: n_seq}
    used = routes_all
    if used is not None and opts.report_sorted_routes:
        used = routes_fwd
    return finish(state, batch, step=step, trained_version=trained_version, train_metrics=tmets, prev=prev_all,
                  ref=ref_all, routes_used=used, updates=updates, increments=increments)

