"""A CORRECT backend: sequence packing with per-row attention isolation (false-positive hunt 2).

What NeMo-RL's `sequence_packing` (and flash-attn varlen trainers: veRL's remove-padding, OpenRLHF's packing) does:
each micro-batch's rows are concatenated into ONE long sequence, padded to a multiple of
`policy.make_sequence_length_divisible_by`, and run as a batch of one. Rows are isolated as `cu_seqlens` isolates them:
a block-diagonal causal attention mask (a token attends only to earlier tokens of its own row) and position ids that
restart at 0 in every row. The tiny policy's public forward has no such mask, so the forward is re-implemented from the
module's own parameters (embedding, patch projection, each block's layers, the head), the same arithmetic otherwise.

Other choices, each legitimate:
- logprobs as ``-cross_entropy(logits.double(), next_ids, reduction='none')`` on the packed sequence, i.e. in float64,
  then cast to the compute dtype; the positions that would predict across a row boundary are dropped;
- padding rows (sample_mask 0, no trained token) are not packed at all: they contribute exactly zero;
- the loss is a flat 1-D token-level sum over the packed trained tokens divided by the global count + 1e-8, and every
  rank's packs backpropagate into one `.grad` unscaled (a SUM all-reduce); the router-replay routes travel packed with
  the tokens (padding positions -1, i.e. the router's own choice, which isolation makes irrelevant);
- clipping by `clip_grad_norm_(foreach=False, error_if_nonfinite=True)`; metrics computed once, after the step, from
  the flat trained-token vectors.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from compactsim.harness.core import metrics as M
from compactsim.harness.core import tokenizer as tok
from compactsim.harness.core.positions import sinusoid
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import validate_physical_trace_training_config
from compactsim.harness.pipeline.trainer import check_batch
from tests.quality._fp_common import EPS, finish, row_images, step_once

SCENARIO = "layout-dp2-microbatch2-mask-sample"  # two rows per pack, a padding row left out, two ranks' packs summed


def _block_forward(block, h, allowed, replay):
    """One transformer block over (B, T, d) hidden states under the boolean attention mask `allowed`, (T, T) or
    (B, 1, T, T): a packed sequence (B = 1) or a left-padded batch (tests/quality/fp_left_padding.py)."""
    b, t, d = h.shape
    nh = block.n_heads
    hs = d // nh
    q, k, v = block.qkv(block.ln1(h)).split(d, dim=-1)
    q, k, v = (x.view(b, t, nh, hs).transpose(1, 2) for x in (q, k, v))
    att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
    att = att.masked_fill(~allowed, float("-inf")).softmax(dim=-1)
    y = (att @ v).transpose(1, 2).reshape(b, t, d)
    h = h + block.proj(y)
    m = block.ln2(h)
    router_logits = block.router(m)
    own = router_logits.topk(block.top_k, dim=-1).indices
    chosen = own if replay is None else torch.where((replay == -1).all(-1, keepdim=True), own, replay)
    gates = router_logits.gather(-1, chosen).softmax(dim=-1)
    weights = (F.one_hot(chosen, router_logits.shape[-1]).to(gates.dtype) * gates[..., None]).sum(-2)
    hidden = F.gelu(torch.einsum("bsd,edf->bsef", m, block.w_in) + block.b_in)
    out = torch.einsum("bsef,efd->bsed", hidden, block.w_out) + block.b_out
    return h + (weights[..., None] * out).sum(-2)


def packed_row_logprobs(policy, rows, ids_rows, lens, images, routes, multiple, cdtype):
    """Own-position logprobs of each packed row: {row: (L,) tensor, column 0 = 0}, from one packed forward."""
    device = policy.device
    segs, pos, pieces, route_pieces = [], [], [], []
    for j, r in enumerate(rows):
        n = int(lens[r])
        pieces.append(ids_rows[r, :n])
        segs.append(torch.full((n,), j, dtype=torch.long, device=device))
        pos.append(torch.arange(n, device=device))
        if routes is not None:
            route_pieces.append(routes[r, :n])
    total = sum(int(lens[r]) for r in rows)
    padded = -(-total // multiple) * multiple
    extra = padded - total
    ids = torch.cat(pieces + [torch.zeros(extra, dtype=torch.long, device=device)])
    seg = torch.cat(segs + [torch.arange(len(rows), len(rows) + extra, device=device)])  # each pad token alone
    position = torch.cat(pos + [torch.zeros(extra, dtype=torch.long, device=device)])
    replay = None
    if routes is not None:
        c = policy.config
        pad_routes = torch.full((extra, c.n_layers, c.top_k), -1, dtype=torch.long, device=device)
        replay = torch.cat([x.long() for x in route_pieces] + [pad_routes])[None]  # (1, T, L, K)

    c = policy.config
    h = policy.tok_emb(ids)[None]  # (1, T, d)
    is_img = ids == tok.IMAGE
    row_imgs = [images[r] for r in rows]
    if bool(is_img.any()) or any(row_imgs):
        emb = torch.cat([policy.embed_images(list(imgs)) for imgs in row_imgs])  # row order = packed order
        h = h.index_put((torch.zeros_like(is_img.nonzero()[:, 0]), is_img.nonzero()[:, 0]), emb)
    table = sinusoid(int(position.max()) + 1, c.d_model, dtype=h.dtype, device=device)
    h = h + table[position][None]
    allowed = (seg[:, None] == seg[None, :]) & (torch.arange(padded, device=device)[None, :]
                                                 <= torch.arange(padded, device=device)[:, None])
    for layer, block in enumerate(policy.blocks):
        h = _block_forward(block, h, allowed, None if replay is None else replay[:, :, layer, :])
    logits = policy.lm_head(policy.ln_f(h))[0]  # (T, V)
    nll = F.cross_entropy(logits[:-1].to(torch.float64), ids[1:], reduction="none")  # predicts packed token i+1
    lp_next = (-nll).to(cdtype)
    out = {}
    start = 0
    for r in rows:
        n = int(lens[r])
        own = torch.zeros(n, dtype=cdtype, device=device)
        if n > 1:
            own = torch.cat([own[:1], lp_next[start:start + n - 1]])
        out[r] = own
        start += n
    return out


class Backend(ReferenceBackend):
    name = "fp-packed-sequences"

    def train_step(self, state, batch, cfg):
        cfg = validate_physical_trace_training_config(cfg)
        check_batch(batch, cfg)
        lc = cfg.loss_fn
        policy, device, dtype = state.policy, state.device, state.dtype
        cdtype = torch.promote_types(dtype, torch.float32)
        step, trained_version = state.optimizer_steps, state.version
        R, S = batch.num_rows, batch.seq_len
        ids_rows = batch.row_input_ids.to(device).long()
        lens = batch.row_input_lengths.tolist()
        images = row_images(batch, dtype, device)
        routes = batch.routed_experts.to(device) if cfg.policy.router_replay_enabled and batch.routed_experts is not None else None
        multiple = cfg.policy.make_sequence_length_divisible_by
        real = [r for r in range(R) if int(batch.parent_indices[r]) >= 0]
        packs = [[r for r in mb if r in set(real)] for k in range(batch.dp_size) for mb in batch.microbatch_rows(k)]
        packs = [p for p in packs if p]
        beta = float(lc.reference_policy_kl_penalty)

        # flat trained-token index: (row, position) of every token the loss trains, in pack order
        tm = batch.row_token_mask.to(device=device, dtype=cdtype)
        sm = batch.row_sample_mask.to(device=device, dtype=cdtype)
        weight = tm[:, 1:] * sm[:, None]  # (R, S-1) position t+1 of a row
        n_tok = float(weight.sum())
        n_seq = float(sm.sum())
        denom = n_tok + EPS

        def own(tensor, rows):
            return {r: tensor[r, : lens[r]].to(device=device, dtype=cdtype) for r in rows}

        adv_rows = own(batch.row_advantages, real)
        gen_rows = own(batch.row_generation_logprobs, real)
        w_rows = {r: torch.cat([torch.zeros(1, dtype=cdtype, device=device), weight[r, : lens[r] - 1]]) for r in real}

        prev_full = torch.zeros(R, S, dtype=cdtype, device=device)
        ref_full = torch.zeros(R, S, dtype=cdtype, device=device) if beta != 0 else None
        with torch.no_grad():
            for p in packs:
                for r, lp in packed_row_logprobs(policy, p, ids_rows, lens, images, routes, multiple, cdtype).items():
                    prev_full[r, : lens[r]] = lp
                if ref_full is not None:
                    for r, lp in packed_row_logprobs(state.reference, p, ids_rows, lens, images, routes, multiple,
                                                     cdtype).items():
                        ref_full[r, : lens[r]] = lp

        params = [p for p in policy.parameters() if p.requires_grad]
        state.optimizer.zero_grad(set_to_none=True)
        curr_flat, prev_flat, gen_flat, w_flat = [], [], [], []
        loss_total = actor_total = kl_total = 0.0
        hi, lo = lc.truncated_importance_sampling_ratio, lc.truncated_importance_sampling_ratio_min
        for p in packs:
            lp_rows = packed_row_logprobs(policy, p, ids_rows, lens, images, routes, multiple, cdtype)
            sel = lambda d: torch.cat([d[r][w_rows[r] != 0] for r in p])  # noqa: E731
            lp = sel(lp_rows)
            m = sel(w_rows)
            a = sel(adv_rows)
            g = sel(gen_rows)
            pv = lp.detach() if lc.force_on_policy_ratio else sel({r: prev_full[r, : lens[r]] for r in p})
            if lc.force_on_policy_ratio:
                r_, rc = torch.exp(lp - lp.detach()), None
                rc = r_
            elif lc.disable_ppo_ratio:
                r_ = rc = lp
            else:
                r_ = torch.exp(lp - pv)
                rc = r_.clamp(1 - lc.ratio_clip_min, 1 + lc.ratio_clip_max)
            pg = torch.max(-a * r_, -a * rc)
            if lc.ratio_clip_c is not None:
                pg = torch.where(a < 0, torch.min(pg, -a * lc.ratio_clip_c), pg)
            w = torch.nan_to_num(torch.exp(pv - g), nan=0.0, posinf=0.0, neginf=0.0).detach()
            if lc.truncated_importance_sampling_type == "tis":
                w = w.clamp(0.0 if lo is None else lo, hi)
            elif lc.truncated_importance_sampling_type == "icepop":
                w = torch.where((w >= lo) & (w <= hi), w, torch.zeros_like(w))
            if not lc.use_importance_sampling_correction:
                w = torch.ones_like(w)
            actor = (w * pg * m).sum()
            total = actor
            if ref_full is not None:
                rf = sel({r: ref_full[r, : lens[r]] for r in p})
                x = rf - lp
                kw = torch.exp(lp - lp.detach())
                if lc.kl_input_clamp_value is not None:
                    xc = x.clamp(-lc.kl_input_clamp_value, lc.kl_input_clamp_value)
                    kw = torch.where(xc != x, kw.detach(), kw)
                    x = xc
                est = {"k1": lambda: -x, "k2": lambda: 0.5 * x * x, "k3": lambda: torch.exp(x) - 1 - x}[lc.reference_policy_kl_type]()
                kl_tok = kw * est
                if lc.kl_output_clamp_value is not None:
                    kl_tok = kl_tok.clamp(-lc.kl_output_clamp_value, lc.kl_output_clamp_value)
                kl = (beta * kl_tok * m).sum()
                total = total + kl
                kl_total += float(kl.detach()) / denom
            (total / denom).backward()
            loss_total += float(total.detach()) / denom
            actor_total += float(actor.detach()) / denom
            curr_flat.append(lp.detach())
            prev_flat.append(pv.detach())
            gen_flat.append(g)
            w_flat.append(m)

        max_norm = cfg.policy.max_grad_norm
        if max_norm is not None:
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=False, error_if_nonfinite=True))
        else:
            grads = [p.grad for p in params if p.grad is not None]
            grad_norm = float(torch.nn.utils.get_total_norm(grads, error_if_nonfinite=True, foreach=False))
        lr = float(state.optimizer.param_groups[0]["lr"])
        updates, increments = step_once(state)

        with torch.no_grad():
            cat = lambda xs: torch.cat(xs) if xs else torch.zeros(0, dtype=cdtype, device=device)  # noqa: E731
            lp, pv, g, m = cat(curr_flat), cat(prev_flat), cat(gen_flat), cat(w_flat)
            if lc.disable_ppo_ratio:
                r_ = rc = lp
            elif lc.force_on_policy_ratio:
                r_ = rc = torch.ones_like(lp)
            else:
                r_ = torch.exp(lp - pv)
                rc = r_.clamp(1 - lc.ratio_clip_min, 1 + lc.ratio_clip_max)
            w = torch.nan_to_num(torch.exp(pv - g), nan=0.0, posinf=0.0, neginf=0.0)
            oob = None
            if lc.truncated_importance_sampling_type == "tis":
                lo_ = 0.0 if lo is None else lo
                oob = (w > hi) | (w < lo_)
                w = w.clamp(lo_, hi)
            elif lc.truncated_importance_sampling_type == "icepop":
                oob = ~((w >= lo) & (w <= hi))
                w = torch.where(oob, torch.zeros_like(w), w)
            mean = lambda v: float((v * m).sum() / denom)  # noqa: E731
            empty = lp.numel() == 0
            train_metrics = {
                "loss": loss_total,
                "actor_loss": actor_total,
                "kl_penalty": kl_total / beta if beta != 0 else 0.0,
                M.TOKEN_MULT_PROB_ERROR: mean(torch.exp((g - pv).abs())),
                "probs_ratio": mean(r_),
                "probs_ratio_clamped": mean(rc),
                "probs_ratio_min": math.inf if empty else float(r_.min()),
                "probs_ratio_max": -math.inf if empty else float(r_.max()),
                "probs_ratio_clamped_min": math.inf if empty else float(rc.min()),
                "probs_ratio_clamped_max": -math.inf if empty else float(rc.max()),
                "sampling_importance_ratio": mean(w),
                "approx_entropy": -mean(torch.exp(lp - g) * lp),
                "num_valid_samples": n_seq,
                M.GRAD_NORM: grad_norm,
                M.LR: lr,
                M.GLOBAL_VALID_TOKENS: n_tok,
                M.GLOBAL_VALID_SEQS: n_seq,
            }
            if oob is not None:
                train_metrics["is_oob_ratio"] = mean(oob.to(cdtype))
        return finish(state, batch, step=step, trained_version=trained_version, train_metrics=train_metrics,
                      prev=prev_full, ref=ref_full, routes_used=routes, updates=updates, increments=increments)
