"""A CORRECT backend: AMP-style dynamic loss scaling through `torch.amp.GradScaler` (false-positive hunt 2).

Mixed-precision trainers (torch AMP, Megatron's fp16 path, DeepSpeed) backpropagate ``loss x S`` and unscale the
gradients before clipping and the optimizer step; the scale S is a power of two, so scaling and unscaling are exact
in binary floating point and the applied gradient is the unscaled one. Written with torch's own machinery:

- one `GradScaler("cpu", init_scale=2**12, growth_interval=1)` per optimizer, kept across steps (the scale doubles
  after every step without inf/NaN: 4096, 8192, ...), `scaler.scale(loss · dp_size).backward()` per micro-batch, each
  rank's accumulated gradient taken aside and the ranks' mean all-reduced into `.grad`;
- `scaler.unscale_(optimizer)` before `clip_grad_norm_` (the gradient norm is the unscaled one), then
  `scaler.step(optimizer)` (exactly one `optimizer.step()` when the gradients are finite) and `scaler.update()`;
- the micro-batch loss is NeMo-RL's `ClippedPGLossFn` as written in fp_nemo_loss_fn.py, logprobs in the compute
  dtype from ``log_softmax`` + gather, metrics summed over micro-batches with `math.fsum`.

A step whose scaled gradients overflowed would be skipped by the scaler (no optimizer step): that never happens at
these magnitudes, and would rightly be a `counts.optimizer` finding for a trainer that must update once per batch.
"""

from __future__ import annotations

import math
import weakref

import torch

from compactsim.harness.core import metrics as M
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import validate_physical_trace_training_config
from compactsim.harness.pipeline.trainer import check_batch
from tests.quality._fp_common import finish, row_images, update_counter
from tests.quality.fp_nemo_loss_fn import ClippedPGLossFn, next_token_logprobs

SCENARIO = "layout-dp2-kl-steps-clip-binds"  # three steps on two ranks where clipping binds: the scaler must unscale first

_SCALERS: "weakref.WeakKeyDictionary[torch.optim.Optimizer, torch.amp.GradScaler]" = weakref.WeakKeyDictionary()


class Backend(ReferenceBackend):
    name = "fp-amp-grad-scaler"

    def train_step(self, state, batch, cfg):
        cfg = validate_physical_trace_training_config(cfg)
        check_batch(batch, cfg)
        scaler = _SCALERS.get(state.optimizer)
        if scaler is None:
            scaler = _SCALERS[state.optimizer] = torch.amp.GradScaler("cpu", init_scale=2.0**12, growth_interval=1)
        policy, device, dtype = state.policy, state.device, state.dtype
        cdtype = torch.promote_types(dtype, torch.float32)
        step, trained_version = state.optimizer_steps, state.version
        lc = cfg.loss_fn
        loss_fn = ClippedPGLossFn(lc)
        dp = batch.dp_size
        R, S = batch.num_rows, batch.seq_len
        images = row_images(batch, dtype, device)
        routes = batch.routed_experts.to(device) if cfg.policy.router_replay_enabled and batch.routed_experts is not None else None
        tm = batch.row_token_mask.to(device=device, dtype=cdtype)
        sm = batch.row_sample_mask.to(device=device, dtype=cdtype)
        n_tok = (tm[:, 1:] * sm[:, None]).sum()
        n_seq = sm.sum()
        prev = torch.zeros(R, S, dtype=cdtype, device=device)
        ref = torch.zeros(R, S, dtype=cdtype, device=device)

        def lp_full(model, rows, w):
            idx = torch.as_tensor(rows, device=device)
            ids = batch.row_input_ids[rows, :w].to(device).long()
            nt = next_token_logprobs(model, ids, [images[r] for r in rows], None if routes is None else routes[idx, :w])
            out = torch.cat([torch.zeros(len(rows), 1, dtype=nt.dtype, device=device), nt], dim=1)
            cols = torch.arange(w, device=device)[None, :]
            return out.masked_fill(cols >= batch.row_input_lengths[rows].to(device)[:, None], 0.0)

        params = [p for p in policy.parameters() if p.requires_grad]
        state.optimizer.zero_grad(set_to_none=True)
        rank_grads, mb_metrics = [], []
        for k in range(dp):
            for mb in batch.microbatch_rows(k):
                rows = list(mb)
                w = max(2, int(batch.row_input_lengths[rows].max()))
                with torch.no_grad():
                    prev[rows, :w] = lp_full(policy, rows, w)
                    if lc.reference_policy_kl_penalty != 0:
                        ref[rows, :w] = lp_full(state.reference, rows, w)
                data = {"token_mask": tm[rows, :w], "sample_mask": sm[rows],
                        "advantages": batch.row_advantages[rows, :w].to(device=device, dtype=cdtype),
                        "generation_logprobs": batch.row_generation_logprobs[rows, :w].to(device=device, dtype=cdtype),
                        "prev_logprobs": prev[rows, :w], "reference_policy_logprobs": ref[rows, :w]}
                curr = lp_full(policy, rows, w)[:, 1:]
                loss, metrics = loss_fn(curr, data, n_seq, n_tok)
                scaler.scale(loss * dp).backward()
                mb_metrics.append(metrics)
            grads = []
            for p in params:
                grads.append(torch.zeros_like(p) if p.grad is None else p.grad.detach().clone())
                p.grad = None
            rank_grads.append(grads)
        for i, p in enumerate(params):
            p.grad = torch.stack([g[i] for g in rank_grads]).sum(0) / dp

        scaler.unscale_(state.optimizer)
        max_norm = cfg.policy.max_grad_norm
        if max_norm is None:
            grad_norm = float(torch.nn.utils.get_total_norm([p.grad for p in params], foreach=False))
        else:
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=False))
        lr = float(state.optimizer.param_groups[0]["lr"])
        before, epoch = update_counter(state.optimizer), int(state.scheduler.last_epoch)
        scaler.step(state.optimizer)
        scaler.update()
        state.scheduler.step()
        state.optimizer_steps += 1
        state.version += 1
        updates, increments = update_counter(state.optimizer) - before, int(state.scheduler.last_epoch) - epoch

        train_metrics = {}
        for key in mb_metrics[0]:
            vals = [m[key] for m in mb_metrics]
            if key.endswith("_min"):
                train_metrics[key] = min(vals)
            elif key.endswith("_max"):
                train_metrics[key] = max(vals)
            else:
                train_metrics[key] = math.fsum(vals)
        train_metrics.update({M.GRAD_NORM: grad_norm, M.LR: lr, M.GLOBAL_VALID_TOKENS: float(n_tok),
                              M.GLOBAL_VALID_SEQS: float(n_seq)})
        return finish(state, batch, step=step, trained_version=trained_version, train_metrics=train_metrics,
                      prev=prev, ref=ref if lc.reference_policy_kl_penalty != 0 else None, routes_used=routes,
                      updates=updates, increments=increments)
