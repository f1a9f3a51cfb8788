"""A CORRECT backend: real data parallelism simulated with one model replica per rank and a hand-written
bucketed ring all-reduce (false-positive hunt 2).

What DDP / Megatron's DistributedDataParallel do, written out:
- every dp rank holds its own replica of the policy (a deep copy of `state.policy`, identical weights) and runs
  forward/backward over its own shard (`TraceBatch.rank_rows`), its micro-batches in a deterministic, seeded
  permutation (gradient accumulation is a sum, so the order only changes rounding), the shard's loss being the
  token-level clipped PG (+ KL) over the GLOBAL valid-token count + 1e-8, times dp_size (the all-reduce averages);
- each replica's gradients are flattened into DDP-style buckets (parameters in reverse registration order, the
  order autograd finishes them), a parameter no row reached contributing zeros (the bucket is preallocated);
- each bucket is all-reduced by a ring: cut into dp chunks, chunk c is reduce-scattered along the ring starting at
  rank c+1 (so every chunk is summed in its own rank order, as NCCL's ring does), then divided by dp_size;
- the reduced flat buffer becomes the main model's `.grad`s as VIEWS into one contiguous buffer (Megatron's grad
  buffer / DDP's gradient_as_bucket_view), so a parameter no row reached gets a zero gradient and is updated
  (its moments and weight decay), as the README allows; zeroing is `zero_grad(set_to_none=False)`;
- logprobs by `torch.gather` on a float64 `log_softmax` of the logits, cast back to the compute dtype;
- clipping by `clip_grad_norm_(foreach=False, error_if_nonfinite=True)`.
"""

from __future__ import annotations

import copy
import math

import torch

from compactsim.harness.core import metrics as M
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import validate_physical_trace_training_config
from compactsim.harness.pipeline.trainer import check_batch
from tests.quality._fp_common import EPS, finish, row_images, step_once

SCENARIO = "layout-dp4-microbatch1"
BUCKET_ELEMENTS = 20_000  # small buckets, so the tiny model spans several


def own_logprobs(model, ids, images, routes, lengths, cdtype):
    """(B, W) own-position logprobs: column 0 and columns past a row's length are 0."""
    logits = model(ids, images, routes).logits[:, :-1]
    lp = torch.log_softmax(logits.to(torch.float64), dim=-1)
    lp = torch.gather(lp, -1, ids[:, 1:, None].long()).squeeze(-1).to(cdtype)
    lp = torch.cat([torch.zeros(ids.shape[0], 1, dtype=cdtype, device=lp.device), lp], dim=1)
    cols = torch.arange(ids.shape[1], device=lp.device)[None, :]
    return lp.masked_fill(cols >= lengths[:, None], 0.0)


def ring_allreduce_mean(buffers: list[torch.Tensor]) -> torch.Tensor:
    """The mean of the ranks' flat buffers, every chunk summed along the ring in its own rank order."""
    world = len(buffers)
    if world == 1:
        return buffers[0].clone()
    n = buffers[0].numel()
    bounds = [round(i * n / world) for i in range(world + 1)]
    out = torch.empty_like(buffers[0])
    for c in range(world):
        a, b = bounds[c], bounds[c + 1]
        acc = buffers[(c + 1) % world][a:b].clone()
        for hop in range(2, world + 1):
            acc = acc + buffers[(c + hop) % world][a:b]
        out[a:b] = acc
    return out / world


class Backend(ReferenceBackend):
    name = "fp-ddp-replicas-ring-allreduce"

    def train_step(self, state, batch, cfg):
        cfg = validate_physical_trace_training_config(cfg)
        check_batch(batch, cfg)
        lc = cfg.loss_fn
        policy, device, dtype = state.policy, state.device, state.dtype
        cdtype = torch.promote_types(dtype, torch.float32)
        step, trained_version = state.optimizer_steps, state.version
        dp, R, S = batch.dp_size, batch.num_rows, batch.seq_len
        beta = float(lc.reference_policy_kl_penalty)
        images = row_images(batch, dtype, device)
        routes = batch.routed_experts.to(device) if cfg.policy.router_replay_enabled and batch.routed_experts is not None else None
        ids_all = batch.row_input_ids.to(device).long()
        lens_all = batch.row_input_lengths.to(device).long()
        tm = batch.row_token_mask.to(device=device, dtype=cdtype)
        sm = batch.row_sample_mask.to(device=device, dtype=cdtype)
        m_all = tm[:, 1:] * sm[:, None]
        n_tok = float(m_all.sum())
        n_seq = float(sm.sum())
        denom = n_tok + EPS
        adv_all = batch.row_advantages[:, 1:].to(device=device, dtype=cdtype)
        gen_all = batch.row_generation_logprobs[:, 1:].to(device=device, dtype=cdtype)
        gen = torch.Generator().manual_seed(1000 + step)

        named = [(n, p) for n, p in policy.named_parameters() if p.requires_grad]
        bucket_order = list(reversed(range(len(named))))  # DDP: reverse registration order
        sizes = [named[i][1].numel() for i in bucket_order]
        total_elems = sum(sizes)

        def mb_inputs(rows):
            idx = torch.as_tensor(rows, dtype=torch.long, device=device)
            w = max(2, int(lens_all[idx].max()))
            return idx, ids_all[idx, :w], [images[r] for r in rows], None if routes is None else routes[idx, :w], lens_all[idx], w

        prev_all = torch.zeros(R, S, dtype=cdtype, device=device)
        ref_all = torch.zeros(R, S, dtype=cdtype, device=device) if beta != 0 else None
        rank_flat: list[torch.Tensor] = []
        per_token = {"curr": torch.zeros(R, S - 1, dtype=cdtype, device=device)}
        loss_sum = actor_sum = kl_sum = 0.0
        for rank in reversed(range(dp)):  # ranks run "concurrently": any order
            replica = copy.deepcopy(policy)
            replica.zero_grad(set_to_none=True)
            mbs = [list(r) for r in batch.microbatch_rows(rank)]
            order = torch.randperm(len(mbs), generator=gen).tolist() if mbs else []
            for j in order:
                rows = mbs[j]
                idx, ids, imgs, rts, lens, w = mb_inputs(rows)
                with torch.no_grad():
                    prev_mb = own_logprobs(replica, ids, imgs, rts, lens, cdtype)
                    prev_all[idx, :w] = prev_mb
                    if ref_all is not None:
                        ref_all[idx, :w] = own_logprobs(state.reference, ids, imgs, rts, lens, cdtype)
                lp = own_logprobs(replica, ids, imgs, rts, lens, cdtype)[:, 1:]
                m = m_all[idx, : w - 1]
                keep = m != 0
                z = torch.zeros((), dtype=cdtype, device=device)
                lp = torch.where(keep, lp, z)
                per_token["curr"][idx, : w - 1] = lp.detach()
                a = torch.where(keep, adv_all[idx, : w - 1], z)
                g = torch.where(keep, gen_all[idx, : w - 1], z)
                pv = lp.detach() if lc.force_on_policy_ratio else torch.where(keep, prev_mb[:, 1:], z)
                if lc.disable_ppo_ratio:
                    r_ = rc = lp
                elif lc.force_on_policy_ratio:
                    r_ = rc = torch.exp(lp - lp.detach())
                else:
                    r_ = torch.exp(lp - pv)
                    rc = r_.clamp(1 - lc.ratio_clip_min, 1 + lc.ratio_clip_max)
                pg = torch.max(-a * r_, -a * rc)
                if lc.ratio_clip_c is not None:
                    pg = torch.where(a < 0, torch.min(pg, -a * lc.ratio_clip_c), pg)
                wts = torch.nan_to_num(torch.exp(pv - g), nan=0.0, posinf=0.0, neginf=0.0)
                hi, lo = lc.truncated_importance_sampling_ratio, lc.truncated_importance_sampling_ratio_min
                if lc.truncated_importance_sampling_type == "tis":
                    wts = wts.clamp(0.0 if lo is None else lo, hi)
                elif lc.truncated_importance_sampling_type == "icepop":
                    wts = torch.where((wts >= lo) & (wts <= hi), wts, z)
                if not lc.use_importance_sampling_correction:
                    wts = torch.ones_like(wts)
                actor = (wts * pg * m).sum() / denom
                total = actor
                if ref_all is not None:
                    rf = torch.where(keep, ref_all[idx, 1:w], z)
                    x = rf - lp
                    kw = torch.exp(lp - lp.detach())
                    if lc.kl_input_clamp_value is not None:
                        xc = x.clamp(-lc.kl_input_clamp_value, lc.kl_input_clamp_value)
                        kw = torch.where(xc == x, kw, kw.detach())
                        x = xc
                    k = {"k1": lambda: -x, "k2": lambda: x.pow(2) / 2, "k3": lambda: x.exp() - 1 - x}[lc.reference_policy_kl_type]()
                    k = kw * k
                    if lc.kl_output_clamp_value is not None:
                        k = k.clamp(-lc.kl_output_clamp_value, lc.kl_output_clamp_value)
                    kl = (beta * k * m).sum() / denom
                    total = total + kl
                    kl_sum += float(kl.detach())
                (total * dp).backward()
                loss_sum += float(total.detach())
                actor_sum += float(actor.detach())
            flat = torch.zeros(total_elems, dtype=dtype, device=device)  # DDP's preallocated buckets
            rparams = [p for _, p in replica.named_parameters() if p.requires_grad]
            off = 0
            for i, size in zip(bucket_order, sizes):
                if rparams[i].grad is not None:
                    flat[off:off + size] = rparams[i].grad.reshape(-1)
                off += size
            rank_flat.append(flat)
            del replica

        # all-reduce bucket by bucket (each bucket is one ring all-reduce)
        reduced = torch.empty(total_elems, dtype=dtype, device=device)
        start = 0
        while start < total_elems:
            end = min(total_elems, start + BUCKET_ELEMENTS)
            reduced[start:end] = ring_allreduce_mean([f[start:end] for f in rank_flat])
            start = end

        state.optimizer.zero_grad(set_to_none=False)
        off = 0
        for i, size in zip(bucket_order, sizes):
            p = named[i][1]
            p.grad = reduced[off:off + size].view_as(p)  # a view into the contiguous grad buffer
            off += size
        params = [p for _, p in named]
        max_norm = cfg.policy.max_grad_norm
        if max_norm is None:
            grad_norm = float(torch.nn.utils.get_total_norm([p.grad for p in params], error_if_nonfinite=True,
                                                            foreach=False))
        else:
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=False, error_if_nonfinite=True))
        lr = float(state.optimizer.param_groups[0]["lr"])
        updates, increments = step_once(state)

        with torch.no_grad():
            keep = m_all != 0
            z = torch.zeros((), dtype=cdtype, device=device)
            lp = per_token["curr"]
            pv = lp if lc.force_on_policy_ratio else torch.where(keep, prev_all[:, 1:], z)
            g = torch.where(keep, gen_all, z)
            if lc.disable_ppo_ratio:
                r_ = rc = lp
            elif lc.force_on_policy_ratio:
                r_ = rc = torch.ones_like(lp)
            else:
                r_ = torch.exp(lp - pv)
                rc = r_.clamp(1 - lc.ratio_clip_min, 1 + lc.ratio_clip_max)
            wts = torch.nan_to_num(torch.exp(pv - g), nan=0.0, posinf=0.0, neginf=0.0)
            hi, lo = lc.truncated_importance_sampling_ratio, lc.truncated_importance_sampling_ratio_min
            oob = None
            if lc.truncated_importance_sampling_type == "tis":
                lo_ = 0.0 if lo is None else lo
                oob = (wts > hi) | (wts < lo_)
                wts = wts.clamp(lo_, hi)
            elif lc.truncated_importance_sampling_type == "icepop":
                oob = (wts < lo) | (wts > hi)
                wts = torch.where(oob, z, wts)

            def mean(v):
                return float((v * m_all).sum() / denom)

            any_tok = bool(keep.any())
            train_metrics = {
                "loss": loss_sum, "actor_loss": actor_sum, "kl_penalty": kl_sum / beta if beta != 0 else 0.0,
                M.TOKEN_MULT_PROB_ERROR: mean(torch.exp((g - pv).abs() * m_all)),
                "probs_ratio": mean(r_), "probs_ratio_clamped": mean(rc),
                "probs_ratio_min": float(r_[keep].min()) if any_tok else math.inf,
                "probs_ratio_max": float(r_[keep].max()) if any_tok else -math.inf,
                "probs_ratio_clamped_min": float(rc[keep].min()) if any_tok else math.inf,
                "probs_ratio_clamped_max": float(rc[keep].max()) if any_tok else -math.inf,
                "sampling_importance_ratio": mean(wts),
                "approx_entropy": -mean(torch.exp(lp - g) * lp),
                "num_valid_samples": n_seq,
                M.GRAD_NORM: grad_norm, M.LR: lr, M.GLOBAL_VALID_TOKENS: n_tok, M.GLOBAL_VALID_SEQS: n_seq,
            }
            if oob is not None:
                train_metrics["is_oob_ratio"] = mean(oob.to(cdtype))
        return finish(state, batch, step=step, trained_version=trained_version, train_metrics=train_metrics,
                      prev=prev_all, ref=ref_all, routes_used=routes, updates=updates, increments=increments)
