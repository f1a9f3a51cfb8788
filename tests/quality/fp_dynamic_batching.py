"""A CORRECT backend: NeMo-RL-style dynamic batching with dummy micro-batches (false-positive hunt 2).

NeMo-RL's `dynamic_batching` (automodel/data.py) cuts each dp rank's rows into micro-batches by a token budget instead
of a fixed row count, and pads each micro-batch only to ITS longest row rounded up to
`make_sequence_length_divisible_by` (not to the batch's width); ranks that end with fewer micro-batches than the
busiest rank run dummy micro-batches whose loss is multiplied by 0 (automodel/train.py: every rank must join each
collective). Written here:

- each rank's real rows sorted by length (longest first, ties by index), packed greedily into micro-batches whose
  padded size ``rows x round_up(longest, divisible_by)`` stays within ``micro_batch_size x round_up(longest row of the
  batch, divisible_by)`` tokens; padding rows are dropped (sample_mask 0: they contribute exactly zero);
- the ranks' micro-batches executed interleaved (round t runs micro-batch t of every rank), each rank's gradient
  accumulated by `torch.autograd.grad` in its own buffer; a rank out of micro-batches repeats its first one with
  loss x 0 (a rank with no row at all runs nothing); the buffers all-reduced by a mean, every loss scaled by dp_size;
- every loss metric accumulated as a torch tensor in the compute dtype across micro-batches (sums of Σ v·m, running
  min/max) and divided by the global count once at the end, then cast with `.item()`: in a float32 run the metrics
  are float32 arithmetic throughout, as a GPU trainer's are; the dummy micro-batches report nothing.
"""

from __future__ import annotations

import math

import torch

from compactsim.harness.core import metrics as M
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import validate_physical_trace_training_config
from compactsim.harness.pipeline.trainer import check_batch
from tests.quality._fp_common import EPS, finish, row_images, step_once

SCENARIO = "layout-sequence-divisible-by-64"


def _round_up(n: int, k: int) -> int:
    return -(-n // k) * k


def dynamic_microbatches(batch, divisible_by: int) -> list[list[list[int]]]:
    lens = batch.row_input_lengths.tolist()
    real_max = max([lens[r] for r in range(batch.num_rows) if int(batch.parent_indices[r]) >= 0], default=2)
    budget = batch.micro_batch_size * _round_up(max(2, real_max), divisible_by)
    ranks = []
    for k in range(batch.dp_size):
        rows = [r for r in batch.rank_rows(k) if int(batch.parent_indices[r]) >= 0]
        rows.sort(key=lambda r: (-lens[r], r))
        mbs: list[list[int]] = []
        for r in rows:
            if mbs:
                cur = mbs[-1]
                width = _round_up(max(2, max(lens[x] for x in cur + [r])), divisible_by)
                if width * (len(cur) + 1) <= budget:
                    cur.append(r)
                    continue
            mbs.append([r])
        ranks.append(mbs)
    return ranks


class Backend(ReferenceBackend):
    name = "fp-dynamic-batching"

    def train_step(self, state, batch, cfg):
        cfg = validate_physical_trace_training_config(cfg)
        check_batch(batch, cfg)
        lc = cfg.loss_fn
        policy, device, dtype = state.policy, state.device, state.dtype
        cdtype = torch.promote_types(dtype, torch.float32)
        step, trained_version = state.optimizer_steps, state.version
        dp, R, S = batch.dp_size, batch.num_rows, batch.seq_len
        div = cfg.policy.make_sequence_length_divisible_by
        beta = float(lc.reference_policy_kl_penalty)
        images = row_images(batch, dtype, device)
        routes = batch.routed_experts.to(device) if cfg.policy.router_replay_enabled and batch.routed_experts is not None else None
        lens = batch.row_input_lengths.to(device).long()
        # every tensor padded out to a width any micro-batch may take (routes: the router's own choice past the row)
        width_all = _round_up(max(S, 2), div)
        ids_all = torch.full((R, width_all), cfg.policy.pad_token_id, dtype=torch.long, device=device)
        ids_all[:, :S] = batch.row_input_ids.to(device).long()
        if routes is not None:
            pad = torch.full((R, width_all - S) + tuple(routes.shape[2:]), -1, dtype=routes.dtype, device=device)
            routes = torch.cat([routes, pad], dim=1)

        def wide(t):
            out = torch.zeros(R, width_all, dtype=cdtype, device=device)
            out[:, :S] = t.to(device=device, dtype=cdtype)
            return out

        tm, adv, gen = wide(batch.row_token_mask), wide(batch.row_advantages), wide(batch.row_generation_logprobs)
        sm = batch.row_sample_mask.to(device=device, dtype=cdtype)
        m_all = tm[:, 1:] * sm[:, None]
        n_tok = m_all.sum()
        n_seq = sm.sum()
        denom = n_tok + EPS

        layout = dynamic_microbatches(batch, div)
        rounds = max((len(mbs) for mbs in layout), default=0)

        def logprobs(model, rows):
            idx = torch.as_tensor(rows, dtype=torch.long, device=device)
            w = _round_up(max(2, int(lens[idx].max())), div)
            ids = ids_all[idx, :w]
            out = model(ids, [images[r] for r in rows], None if routes is None else routes[idx, :w])
            lp = out.logits[:, :-1].to(cdtype).log_softmax(-1).gather(-1, ids[:, 1:, None])[..., 0]  # next-token frame
            return idx, w, lp

        params = [p for p in policy.parameters() if p.requires_grad]
        state.optimizer.zero_grad(set_to_none=True)
        bufs: list[list[torch.Tensor | None]] = [[None] * len(params) for _ in range(dp)]
        z = torch.zeros((), dtype=cdtype, device=device)
        acc = {k: torch.zeros((), dtype=cdtype, device=device) for k in
               ("loss", "actor", "kl", "err", "ratio", "ratio_c", "w", "ent", "oob")}
        ext = {"min": torch.tensor(math.inf, dtype=cdtype), "max": torch.tensor(-math.inf, dtype=cdtype),
               "cmin": torch.tensor(math.inf, dtype=cdtype), "cmax": torch.tensor(-math.inf, dtype=cdtype)}
        prev_all = torch.zeros(R, S, dtype=cdtype, device=device)
        ref_all = torch.zeros(R, S, dtype=cdtype, device=device) if beta != 0 else None
        hi, lo = lc.truncated_importance_sampling_ratio, lc.truncated_importance_sampling_ratio_min
        for t in range(rounds):
            for k in range(dp):
                if not layout[k]:
                    continue
                dummy = t >= len(layout[k])
                rows = layout[k][0 if dummy else t]
                with torch.no_grad():
                    idx, w, pv_mb = logprobs(policy, rows)
                    rf_mb = logprobs(state.reference, rows)[2] if ref_all is not None else None
                idx, w, lp = logprobs(policy, rows)
                m = m_all[idx, : w - 1]
                keep = m != 0
                lp = torch.where(keep, lp, z)
                a = torch.where(keep, adv[idx, 1:w], z)
                g = torch.where(keep, gen[idx, 1:w], z)
                pv = lp.detach() if lc.force_on_policy_ratio else torch.where(keep, pv_mb, z)
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
                oob = None
                if lc.truncated_importance_sampling_type == "tis":
                    lo_ = 0.0 if lo is None else lo
                    oob = (wts > hi) | (wts < lo_)
                    wts = wts.clamp(lo_, hi)
                elif lc.truncated_importance_sampling_type == "icepop":
                    oob = (wts < lo) | (wts > hi)
                    wts = torch.where(oob, z, wts)
                used = wts if lc.use_importance_sampling_correction else torch.ones_like(wts)
                actor_sum = (used * pg * m).sum()
                kl_sum = z
                if rf_mb is not None:
                    x = torch.where(keep, rf_mb, z) - lp
                    kw = torch.exp(lp - lp.detach())
                    if lc.kl_input_clamp_value is not None:
                        xc = x.clamp(-lc.kl_input_clamp_value, lc.kl_input_clamp_value)
                        kw = torch.where(x == xc, kw, kw.detach())
                        x = xc
                    est = {"k1": lambda: -x, "k2": lambda: 0.5 * x * x, "k3": lambda: torch.exp(x) - 1 - x}[lc.reference_policy_kl_type]()
                    kl_tok = kw * est
                    if lc.kl_output_clamp_value is not None:
                        kl_tok = kl_tok.clamp(-lc.kl_output_clamp_value, lc.kl_output_clamp_value)
                    kl_sum = (beta * kl_tok * m).sum()
                loss = (actor_sum + kl_sum) / denom * dp * (0.0 if dummy else 1.0)
                grads = torch.autograd.grad(loss, params, allow_unused=True)
                for j, gr in enumerate(grads):
                    if gr is not None:
                        bufs[k][j] = gr if bufs[k][j] is None else bufs[k][j] + gr
                if dummy:
                    continue
                with torch.no_grad():
                    prev_all[idx, 1:w] = torch.where(keep, pv_mb, z) if not lc.force_on_policy_ratio else pv
                    if ref_all is not None:
                        ref_all[idx, 1:w] = rf_mb
                    acc["loss"] += (actor_sum + kl_sum).detach()
                    acc["actor"] += actor_sum.detach()
                    acc["kl"] += kl_sum.detach()
                    acc["err"] += (torch.exp((g - pv).abs() * m) * m).sum()
                    acc["ratio"] += (r_.detach() * m).sum()
                    acc["ratio_c"] += (rc.detach() * m).sum()
                    acc["w"] += (wts * m).sum()
                    acc["ent"] += (torch.exp(lp.detach() - g) * lp.detach() * m).sum()
                    if oob is not None:
                        acc["oob"] += (oob.to(cdtype) * m).sum()
                    if bool(keep.any()):
                        ext["min"] = torch.minimum(ext["min"], r_.detach()[keep].min().cpu())
                        ext["max"] = torch.maximum(ext["max"], r_.detach()[keep].max().cpu())
                        ext["cmin"] = torch.minimum(ext["cmin"], rc.detach()[keep].min().cpu())
                        ext["cmax"] = torch.maximum(ext["cmax"], rc.detach()[keep].max().cpu())

        for j, p in enumerate(params):
            parts = [b[j] for b in bufs if b[j] is not None]
            if parts:
                p.grad = (torch.stack(parts).sum(0) / dp).to(p.dtype)
        grads = [p.grad for p in params if p.grad is not None]
        norm = torch.nn.utils.get_total_norm(grads, norm_type=2.0, foreach=False)
        if cfg.policy.max_grad_norm is not None:
            torch.nn.utils.clip_grads_with_norm_(params, cfg.policy.max_grad_norm, norm, foreach=False)
        lr = state.optimizer.param_groups[0]["lr"]
        updates, increments = step_once(state)

        train_metrics = {
            "loss": (acc["loss"] / denom).item(),
            "actor_loss": (acc["actor"] / denom).item(),
            "kl_penalty": (acc["kl"] / denom).item() / beta if beta != 0 else 0.0,
            M.TOKEN_MULT_PROB_ERROR: (acc["err"] / denom).item(),
            "probs_ratio": (acc["ratio"] / denom).item(),
            "probs_ratio_clamped": (acc["ratio_c"] / denom).item(),
            "probs_ratio_min": ext["min"].item(), "probs_ratio_max": ext["max"].item(),
            "probs_ratio_clamped_min": ext["cmin"].item(), "probs_ratio_clamped_max": ext["cmax"].item(),
            "sampling_importance_ratio": (acc["w"] / denom).item(),
            "approx_entropy": -(acc["ent"] / denom).item(),
            "num_valid_samples": n_seq.item(),
            M.GRAD_NORM: norm.item(), M.LR: float(lr),
            M.GLOBAL_VALID_TOKENS: n_tok.item(), M.GLOBAL_VALID_SEQS: n_seq.item(),
        }
        if lc.truncated_importance_sampling_type is not None:
            train_metrics["is_oob_ratio"] = (acc["oob"] / denom).item()
        return finish(state, batch, step=step, trained_version=trained_version, train_metrics=train_metrics,
                      prev=prev_all, ref=ref_all, routes_used=None if routes is None else routes[:, :S],
                      updates=updates, increments=increments)
