"""A CORRECT backend: LEFT-padded micro-batches with position ids and a key-padding mask (false-positive hunt 2).

Hugging Face-style trainers (TRL, OpenRLHF's generation-side batches) often left-pad: each micro-batch's rows are
right-aligned to the micro-batch's longest row, position ids are ``cumsum(attention_mask) − 1`` (0 at every row's
first real token) and attention is causal AND restricted to real keys; a padding query attends to itself only (so
its softmax is defined and its output, never trained, stays finite). Under a causal model with per-row positions the
real positions' logits are exactly the right-padded ones up to matmul rounding. The tiny policy's public forward
knows only right padding, so the forward is the one re-implemented from the module's own layers in
fp_packed_sequences.py (its `_block_forward` takes any boolean mask), run here on a (B, W) left-padded batch.

The rest: routes left-padded with -1 rows (the router's own choice at padding), the logprobs moved back to the
batch's own-position right-padded frame, NeMo-RL's `ClippedPGLossFn` (fp_nemo_loss_fn.py) per micro-batch with the
global counts, ``loss · dp_size`` per rank and a mean all-reduce, `clip_grad_norm_` with torch's default foreach.
"""

from __future__ import annotations

import math

import torch

from compactsim.harness.core import metrics as M
from compactsim.harness.core import tokenizer as tok
from compactsim.harness.core.positions import sinusoid
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import validate_physical_trace_training_config
from compactsim.harness.pipeline.trainer import check_batch
from tests.quality._fp_common import finish, row_images, step_once
from tests.quality.fp_nemo_loss_fn import ClippedPGLossFn
from tests.quality.fp_packed_sequences import _block_forward

SCENARIO = "reordered-images"


def left_padded_logprobs(policy, batch, rows, images, routes, pad_id, cdtype):
    """(len(rows), W) own-position RIGHT-padded logprobs of `rows`, from one left-padded forward."""
    device = policy.device
    lens = [int(batch.row_input_lengths[r]) for r in rows]
    W = max(2, max(lens))
    b = len(rows)
    ids = torch.full((b, W), pad_id, dtype=torch.long, device=device)
    real = torch.zeros(b, W, dtype=torch.bool, device=device)
    c = policy.config
    replay = None
    if routes is not None:
        replay = torch.full((b, W, c.n_layers, c.top_k), -1, dtype=torch.long, device=device)
    for i, (r, n) in enumerate(zip(rows, lens)):
        ids[i, W - n:] = batch.row_input_ids[r, :n].to(device)
        real[i, W - n:] = True
        if replay is not None:
            replay[i, W - n:] = routes[r, :n].long()
    position = (real.long().cumsum(-1) - 1).clamp(min=0)
    h = policy.tok_emb(ids)
    is_img = (ids == tok.IMAGE) & real
    row_imgs = [images[r] for r in rows]
    if bool(is_img.any()) or any(row_imgs):
        emb = torch.cat([policy.embed_images(list(x)) for x in row_imgs])  # row-major = nonzero() order
        bi, si = is_img.nonzero(as_tuple=True)
        h = h.index_put((bi, si), emb)
    h = h + sinusoid(W, c.d_model, dtype=h.dtype, device=device)[position]
    causal = torch.ones(W, W, dtype=torch.bool, device=device).tril()
    allowed = causal[None] & real[:, None, :] & real[:, :, None]
    allowed = allowed | torch.eye(W, dtype=torch.bool, device=device)[None]  # a padding query sees itself
    allowed = allowed[:, None]  # (B, 1, W, W) over the heads
    for layer, block in enumerate(policy.blocks):
        h = _block_forward(block, h, allowed, None if replay is None else replay[:, :, layer, :])
    logits = policy.lm_head(policy.ln_f(h)).to(cdtype)
    lp_next = logits[:, :-1].log_softmax(-1).gather(-1, ids[:, 1:, None])[..., 0]  # predicts column j+1
    out = torch.zeros(b, W, dtype=cdtype, device=device)
    for i, n in enumerate(lens):
        if n > 1:
            out[i, 1:n] = lp_next[i, W - n: W - 1]
    return out


class Backend(ReferenceBackend):
    name = "fp-left-padding"

    def train_step(self, state, batch, cfg):
        cfg = validate_physical_trace_training_config(cfg)
        check_batch(batch, cfg)
        lc = cfg.loss_fn
        policy, device, dtype = state.policy, state.device, state.dtype
        cdtype = torch.promote_types(dtype, torch.float32)
        step, trained_version = state.optimizer_steps, state.version
        dp, R, S = batch.dp_size, batch.num_rows, batch.seq_len
        pad_id = cfg.policy.pad_token_id
        images = row_images(batch, dtype, device)
        routes = batch.routed_experts.to(device) if cfg.policy.router_replay_enabled and batch.routed_experts is not None else None
        loss_fn = ClippedPGLossFn(lc)
        tm = batch.row_token_mask.to(device=device, dtype=cdtype)
        sm = batch.row_sample_mask.to(device=device, dtype=cdtype)
        n_tok = (tm[:, 1:] * sm[:, None]).sum()
        n_seq = sm.sum()
        beta = lc.reference_policy_kl_penalty
        prev = torch.zeros(R, S, dtype=cdtype, device=device)
        ref = torch.zeros(R, S, dtype=cdtype, device=device)
        layout = [[list(mb) for mb in batch.microbatch_rows(k)] for k in range(dp)]
        with torch.no_grad():
            for mbs in layout:
                for rows in mbs:
                    lp = left_padded_logprobs(policy, batch, rows, images, routes, pad_id, cdtype)
                    prev[rows, : lp.shape[1]] = lp
                    if beta != 0:
                        lp = left_padded_logprobs(state.reference, batch, rows, images, routes, pad_id, cdtype)
                        ref[rows, : lp.shape[1]] = lp

        params = [p for p in policy.parameters() if p.requires_grad]
        state.optimizer.zero_grad()
        rank_grads, mb_metrics = [], []
        for mbs in layout:
            for rows in mbs:
                lp = left_padded_logprobs(policy, batch, rows, images, routes, pad_id, cdtype)
                W = lp.shape[1]
                data = {"token_mask": tm[rows, :W], "sample_mask": sm[rows],
                        "advantages": batch.row_advantages[rows, :W].to(device=device, dtype=cdtype),
                        "generation_logprobs": batch.row_generation_logprobs[rows, :W].to(device=device, dtype=cdtype),
                        "prev_logprobs": prev[rows, :W], "reference_policy_logprobs": ref[rows, :W]}
                loss, metrics = loss_fn(lp[:, 1:], data, n_seq, n_tok)
                if loss.requires_grad:  # a micro-batch of one-token padding rows has no logprob at all
                    (loss * dp).backward()
                mb_metrics.append(metrics)
            rank_grads.append([None if p.grad is None else p.grad.detach().clone() for p in params])
            for p in params:
                p.grad = None
        for i, p in enumerate(params):
            parts = [g[i] for g in rank_grads if g[i] is not None]
            if parts:
                p.grad = torch.stack(parts).sum(0) / dp
        grads = [p for p in params if p.grad is not None]
        if cfg.policy.max_grad_norm is None:
            grad_norm = float(torch.nn.utils.get_total_norm([p.grad for p in grads]))
        else:
            grad_norm = float(torch.nn.utils.clip_grad_norm_(grads, cfg.policy.max_grad_norm))
        lr = float(state.optimizer.param_groups[0]["lr"])
        updates, increments = step_once(state)

        train_metrics = {}
        for key in mb_metrics[0]:
            vals = [m[key] for m in mb_metrics]
            train_metrics[key] = min(vals) if key.endswith("_min") else max(vals) if key.endswith("_max") else math.fsum(vals)
        train_metrics.update({M.GRAD_NORM: grad_norm, M.LR: lr, M.GLOBAL_VALID_TOKENS: float(n_tok),
                              M.GLOBAL_VALID_SEQS: float(n_seq)})
        return finish(state, batch, step=step, trained_version=trained_version, train_metrics=train_metrics,
                      prev=prev, ref=ref if beta != 0 else None, routes_used=routes, updates=updates,
                      increments=increments)
