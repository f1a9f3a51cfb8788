"""A CORRECT backend: the step written functionally with `torch.func` (false-positive hunt 2).

The JAX-style way some trainers write the step (torch.func / functorch, e.g. for per-sample gradients or to keep
the model stateless): the micro-batch loss is a pure function of a dict of parameter tensors,
``loss_fn(params, microbatch) -> (loss, aux)``, evaluated with `torch.func.functional_call` and differentiated with
``torch.func.grad(loss_fn, has_aux=True)``. Consequences that differ from the reference, all legitimate:

- no `.backward()`, no accumulation in `.grad`: each micro-batch returns a fresh gradient dict, summed by hand per
  rank, and the ranks' sums are added (a SUM all-reduce: the loss is the global-count token sum, never scaled by
  dp_size); the total is written into `.grad` only once, right before clipping;
- `torch.func.grad` returns a ZERO gradient for a parameter the loss does not reach (the image patch projection on a
  text-only batch), so every parameter takes part in the update, as FSDP's flat buffers hand it (README: either way);
- `prev`/reference logprobs from the same pure function under `torch.no_grad`, the KL score-function weight
  ``exp(lp − sg(lp))`` written as ``exp(lp − lp.detach())`` inside the transformed function;
- clipping written as the functional ``g·min(1, c/(‖g‖ + 1e-6))`` over the gradient dict before it is assigned;
- `optimizer.zero_grad(set_to_none=False)` before assigning (the assigned tensors replace the zeroed ones).
"""

from __future__ import annotations

import math

import torch
from torch.func import functional_call, grad

from compactsim.harness.core import metrics as M
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import validate_physical_trace_training_config
from compactsim.harness.pipeline.trainer import check_batch
from tests.quality._fp_common import EPS, finish, row_images, step_once

SCENARIO = "kl-k3-input-clamp-binds"


def _next_token_logprobs(policy, params, ids, images, routes, cdtype):
    out = functional_call(policy, params, (ids, images, routes))
    return out.logits[:, :-1].to(cdtype).log_softmax(-1).gather(-1, ids[:, 1:, None])[..., 0]


def _token_terms(lp, mb, lc, cdtype):
    """Per-token actor and KL losses (next-token frame) and the quantities the metrics need."""
    z = torch.zeros((), dtype=cdtype, device=lp.device)
    keep = mb["m"] != 0
    lp = torch.where(keep, lp, z)
    a, g = mb["adv"], mb["gen"]
    pv = lp.detach() if lc.force_on_policy_ratio else mb["prev"]
    if lc.disable_ppo_ratio:
        r, rc = lp, lp
    elif lc.force_on_policy_ratio:
        r = torch.exp(lp - lp.detach())
        rc = r
    else:
        r = torch.exp(lp - pv)
        rc = torch.clamp(r, 1 - lc.ratio_clip_min, 1 + lc.ratio_clip_max)
    pg = torch.maximum(-a * r, -a * rc)
    if lc.ratio_clip_c is not None:
        pg = torch.where(a < 0, torch.minimum(pg, -a * lc.ratio_clip_c), pg)
    w = torch.nan_to_num(torch.exp(pv - g), nan=0.0, posinf=0.0, neginf=0.0)
    hi, lo = lc.truncated_importance_sampling_ratio, lc.truncated_importance_sampling_ratio_min
    oob = None
    if lc.truncated_importance_sampling_type == "tis":
        lo = 0.0 if lo is None else lo
        oob = (w > hi) | (w < lo)
        w = torch.clamp(w, lo, hi)
    elif lc.truncated_importance_sampling_type == "icepop":
        oob = (w < lo) | (w > hi)
        w = torch.where(oob, z, w)
    actor_tok = (w if lc.use_importance_sampling_correction else torch.ones_like(w)) * pg
    kl_tok = torch.zeros_like(lp)
    if mb.get("ref") is not None:
        x = mb["ref"] - lp
        weight = torch.exp(lp - lp.detach())
        if lc.kl_input_clamp_value is not None:
            xc = torch.clamp(x, -lc.kl_input_clamp_value, lc.kl_input_clamp_value)
            weight = torch.where(xc == x, weight, weight.detach())
            x = xc
        if lc.reference_policy_kl_type == "k1":
            k = -x
        elif lc.reference_policy_kl_type == "k2":
            k = 0.5 * x * x
        else:
            k = torch.exp(x) - 1 - x
        kl_tok = weight * k
        if lc.kl_output_clamp_value is not None:
            kl_tok = torch.clamp(kl_tok, -lc.kl_output_clamp_value, lc.kl_output_clamp_value)
        kl_tok = lc.reference_policy_kl_penalty * kl_tok
    return dict(lp=lp, pv=pv, g=g, r=r, rc=rc, w=w, oob=oob, actor_tok=actor_tok, kl_tok=kl_tok)


class Backend(ReferenceBackend):
    name = "fp-functional-grad"

    def train_step(self, state, batch, cfg):
        cfg = validate_physical_trace_training_config(cfg)
        check_batch(batch, cfg)
        lc = cfg.loss_fn
        policy, device, dtype = state.policy, state.device, state.dtype
        cdtype = torch.promote_types(dtype, torch.float32)
        step, trained_version = state.optimizer_steps, state.version
        R, S = batch.num_rows, batch.seq_len
        beta = float(lc.reference_policy_kl_penalty)
        images = row_images(batch, dtype, device)
        routes = batch.routed_experts.to(device) if cfg.policy.router_replay_enabled and batch.routed_experts is not None else None
        ids_all = batch.row_input_ids.to(device).long()
        lens = batch.row_input_lengths.to(device).long()
        m_all = batch.row_token_mask[:, 1:].to(device=device, dtype=cdtype) * batch.row_sample_mask.to(device=device, dtype=cdtype)[:, None]
        n_tok = float(m_all.sum())
        n_seq = float(batch.row_sample_mask.to(torch.float64).sum())
        denom = n_tok + EPS
        adv_all = batch.row_advantages[:, 1:].to(device=device, dtype=cdtype)
        gen_all = batch.row_generation_logprobs[:, 1:].to(device=device, dtype=cdtype)

        names = [n for n, p in policy.named_parameters() if p.requires_grad]
        params = {n: p.detach() for n, p in policy.named_parameters()}
        ref_params = None
        if beta != 0:
            ref_params = {n: p.detach() for n, p in state.reference.named_parameters()}

        def mb_data(rows):
            idx = torch.as_tensor(rows, dtype=torch.long, device=device)
            w = max(2, int(lens[idx].max()))
            z = torch.zeros((), dtype=cdtype, device=device)
            m = m_all[idx, : w - 1]
            keep = m != 0
            return idx, w, {
                "ids": ids_all[idx, :w], "images": [images[r] for r in rows],
                "routes": None if routes is None else routes[idx, :w],
                "m": m, "adv": torch.where(keep, adv_all[idx, : w - 1], z), "gen": torch.where(keep, gen_all[idx, : w - 1], z),
            }

        def loss_fn(p, mb):
            lp = _next_token_logprobs(policy, p, mb["ids"], mb["images"], mb["routes"], cdtype)
            terms = _token_terms(lp, mb, lc, cdtype)
            loss = ((terms["actor_tok"] + terms["kl_tok"]) * mb["m"]).sum() / denom
            return loss, {k: v.detach() for k, v in terms.items() if v is not None}

        grad_fn = grad(loss_fn, has_aux=True)
        prev_all = torch.zeros(R, S, dtype=cdtype, device=device)
        ref_all = torch.zeros(R, S, dtype=cdtype, device=device) if beta != 0 else None
        total = {n: torch.zeros_like(params[n]) for n in names}
        gathered = []
        for rank in range(batch.dp_size):
            rank_sum = {n: torch.zeros_like(params[n]) for n in names}
            for rows in batch.microbatch_rows(rank):
                idx, w, mb = mb_data(list(rows))
                keep = mb["m"] != 0
                z = torch.zeros((), dtype=cdtype, device=device)
                with torch.no_grad():
                    mb["prev"] = torch.where(keep, _next_token_logprobs(policy, params, mb["ids"], mb["images"],
                                                                         mb["routes"], cdtype), z)
                    prev_all[idx, 1:w] = mb["prev"]
                    mb["ref"] = None
                    if ref_params is not None:
                        mb["ref"] = torch.where(keep, _next_token_logprobs(state.reference, ref_params, mb["ids"],
                                                                            mb["images"], mb["routes"], cdtype), z)
                        ref_all[idx, 1:w] = mb["ref"]
                g, aux = grad_fn(params, mb)
                for n in names:
                    rank_sum[n] = rank_sum[n] + g[n]
                gathered.append((mb["m"], aux))
            for n in names:  # SUM all-reduce
                total[n] = total[n] + rank_sum[n]

        norm = math.sqrt(math.fsum(float((t.to(torch.float64) ** 2).sum()) for t in total.values()))
        if cfg.policy.max_grad_norm is not None:
            coef = min(1.0, cfg.policy.max_grad_norm / (norm + 1e-6))
            total = {n: t * coef for n, t in total.items()}
        state.optimizer.zero_grad(set_to_none=False)
        named = dict(policy.named_parameters())
        for n in names:
            named[n].grad = total[n].to(named[n].dtype)
        lr = float(state.optimizer.param_groups[0]["lr"])
        updates, increments = step_once(state)

        with torch.no_grad():
            def s(key, f=lambda v: v):
                return math.fsum(float((f(aux[key]) * m).sum()) for m, aux in gathered) / denom

            kept = [(aux, m != 0) for m, aux in gathered]
            rs = [aux["r"][k] for aux, k in kept if bool(k.any())]
            rcs = [aux["rc"][k] for aux, k in kept if bool(k.any())]
            actor = s("actor_tok")
            kl = s("kl_tok")
            train_metrics = {
                "loss": actor + kl,
                "actor_loss": actor,
                "kl_penalty": kl / beta if beta != 0 else 0.0,
                M.TOKEN_MULT_PROB_ERROR: math.fsum(float((torch.exp((aux["g"] - aux["pv"]).abs() * m) * m).sum())
                                                   for m, aux in gathered) / denom,
                "probs_ratio": s("r"),
                "probs_ratio_clamped": s("rc"),
                "probs_ratio_min": min((float(x.min()) for x in rs), default=math.inf),
                "probs_ratio_max": max((float(x.max()) for x in rs), default=-math.inf),
                "probs_ratio_clamped_min": min((float(x.min()) for x in rcs), default=math.inf),
                "probs_ratio_clamped_max": max((float(x.max()) for x in rcs), default=-math.inf),
                "sampling_importance_ratio": s("w"),
                "approx_entropy": -math.fsum(float((torch.exp(aux["lp"] - aux["g"]) * aux["lp"] * m).sum())
                                             for m, aux in gathered) / denom,
                "num_valid_samples": n_seq,
                M.GRAD_NORM: norm, M.LR: lr, M.GLOBAL_VALID_TOKENS: n_tok, M.GLOBAL_VALID_SEQS: n_seq,
            }
            if lc.truncated_importance_sampling_type is not None:
                train_metrics["is_oob_ratio"] = s("oob", lambda v: v.to(cdtype))
        return finish(state, batch, step=step, trained_version=trained_version, train_metrics=train_metrics,
                      prev=prev_all, ref=ref_all, routes_used=routes, updates=updates, increments=increments)
