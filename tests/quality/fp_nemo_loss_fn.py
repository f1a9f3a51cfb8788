"""A CORRECT backend laid out like NeMo-RL's DTensor worker calling its `ClippedPGLossFn` (false-positive hunt 2).

Written from shared/reference/nemo-rl-semantics.md §3.5-§3.7 and §4 only, in NeMo-RL's own structure:

- a `ClippedPGLossFn` object called per micro-batch as ``loss_fn(next_token_logprobs, data, global_valid_seqs,
  global_valid_toks)`` on a `BatchedDataDict`-like dict of own-position ``[B, S]`` tensors, slicing every field
  ``[:, 1:]`` itself, with NeMo's `masked_mean(values, mask, global_normalization_factor=N)` =
  ``Σ values·mask / (N + 1e-8)``; nothing is zeroed before the arithmetic (the logprobs are real numbers at every
  position, padding included: the masks do the work), unlike the reference's `torch.where` pre-masking;
- the batch padded to its full width S for every micro-batch (NeMo pads the whole batch to
  `make_sequence_length_divisible_by`), `prev_logprobs` from a separate no-grad `get_logprobs` pass whose
  logprob batch is a whole dp shard (NeMo's `logprob_batch_size` differs from the train micro-batch size);
- the worker loop: `global_valid_toks`/`seqs` counted per global batch over every dp rank, each micro-batch's
  ``loss · dp_size`` backpropagated (undoing FSDP's mean all-reduce), the per-micro-batch metric dicts gaining
  `lr`, `global_valid_seqs`, `global_valid_toks` and dropped when their `num_valid_samples` is 0, then
  aggregated by the driver's rule (§3.7): `_min`/`_max` by min/max ignoring ±inf (−1.0 if none), `lr` and the
  global counts by their mean, everything else by `np.sum`; `loss` is NeMo's `global_loss`, the sum of the kept
  micro-batch losses (0.0 when every micro-batch was dropped);
- NeMo's `get_grad_norm` (``(Σ_p ‖g_p‖²)^½``) and `clip_grad_by_total_norm_` (``g·c/(‖g‖ + 1e-6)`` when below 1).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from compactsim.harness.core import metrics as M
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import validate_physical_trace_training_config
from compactsim.harness.pipeline.trainer import check_batch
from tests.quality._fp_common import EPS, finish, row_images, step_once

SCENARIO = "all-equal-rewards"  # once a false positive: an exactly-zero expected gradient (see the README's train.gradient row)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, global_normalization_factor: torch.Tensor | float) -> torch.Tensor:
    return torch.sum(values * mask) / (global_normalization_factor + EPS)


def calculate_kl(logprobs, logprobs_reference, kl_type, input_clamp_value=None, output_clamp_value=None, weights=None):
    """k1/k2/k3 of x = ref − lp; the weight detached where the input clamp bites, the product clamped (§4.5)."""
    logr = logprobs_reference - logprobs
    if input_clamp_value is not None:
        clamped = logr.clamp(min=-input_clamp_value, max=input_clamp_value)
        if weights is not None:
            weights = torch.where(clamped != logr, weights.detach(), weights)
        logr = clamped
    if kl_type == "k1":
        kl = -logr
    elif kl_type == "k2":
        kl = torch.square(logr) / 2
    elif kl_type == "k3":
        kl = torch.exp(logr) - 1 - logr
    else:
        raise ValueError(kl_type)
    if weights is not None:
        kl = weights * kl
    if output_clamp_value is not None:
        kl = kl.clamp(min=-output_clamp_value, max=output_clamp_value)
    return kl


class ClippedPGLossFn:
    def __init__(self, cfg) -> None:
        self.ratio_clip_min = cfg.ratio_clip_min
        self.ratio_clip_max = cfg.ratio_clip_max
        self.ratio_clip_c = cfg.ratio_clip_c
        self.reference_policy_kl_penalty = cfg.reference_policy_kl_penalty
        self.reference_policy_kl_type = cfg.reference_policy_kl_type
        self.kl_input_clamp_value = cfg.kl_input_clamp_value
        self.kl_output_clamp_value = cfg.kl_output_clamp_value
        self.disable_ppo_ratio = cfg.disable_ppo_ratio
        self.force_on_policy_ratio = cfg.force_on_policy_ratio
        self.use_importance_sampling_correction = cfg.use_importance_sampling_correction
        self.truncated_importance_sampling_type = cfg.truncated_importance_sampling_type
        self.truncated_importance_sampling_ratio = cfg.truncated_importance_sampling_ratio
        self.truncated_importance_sampling_ratio_min = cfg.truncated_importance_sampling_ratio_min

    def __call__(self, next_token_logprobs, data, global_valid_seqs, global_valid_toks):
        token_mask = data["token_mask"][:, 1:]
        sample_mask = data["sample_mask"]
        advantages = data["advantages"][:, 1:]
        generation_logprobs = data["generation_logprobs"][:, 1:]
        reference_policy_logprobs = data["reference_policy_logprobs"][:, 1:]
        curr_logprobs = next_token_logprobs
        if self.force_on_policy_ratio:
            prev_logprobs = curr_logprobs.detach()
        else:
            prev_logprobs = data["prev_logprobs"][:, 1:]
        mask = token_mask * sample_mask.unsqueeze(-1)

        with torch.no_grad():
            lp_error = torch.abs(generation_logprobs - prev_logprobs)
            mult_prob_error = masked_mean(torch.exp(lp_error * mask), mask, global_valid_toks).item()
            gen_kl_error = masked_mean(calculate_kl(generation_logprobs, prev_logprobs, self.reference_policy_kl_type),
                                       mask, global_valid_toks).item()
            policy_kl_error = masked_mean(calculate_kl(prev_logprobs, generation_logprobs,
                                                       self.reference_policy_kl_type), mask, global_valid_toks).item()
            log_m = torch.log(0.5 * torch.exp(prev_logprobs) + 0.5 * torch.exp(generation_logprobs))
            a, b = prev_logprobs - log_m, generation_logprobs - log_m
            js = 0.5 * (torch.exp(a) - a - 1) + 0.5 * (torch.exp(b) - b - 1)
            js_divergence_error = masked_mean(js, mask, global_valid_toks).item()

        if self.reference_policy_kl_penalty != 0:
            kl_importance_weights = torch.exp(curr_logprobs - curr_logprobs.detach())
            kl = self.reference_policy_kl_penalty * calculate_kl(
                curr_logprobs, reference_policy_logprobs, self.reference_policy_kl_type,
                self.kl_input_clamp_value, self.kl_output_clamp_value, kl_importance_weights)
            kl = masked_mean(kl, mask, global_valid_toks)
        else:
            kl = torch.tensor(0.0, dtype=curr_logprobs.dtype, device=curr_logprobs.device)

        if self.force_on_policy_ratio:
            ratios = torch.exp(curr_logprobs - curr_logprobs.detach())
            ratios_clamped = ratios
        elif self.disable_ppo_ratio:
            ratios = curr_logprobs
            ratios_clamped = curr_logprobs
        else:
            ratios = (curr_logprobs - prev_logprobs).exp()
            ratios_clamped = ratios.clamp(1.0 - self.ratio_clip_min, 1.0 + self.ratio_clip_max)
        loss1 = -advantages * ratios
        loss2 = -advantages * ratios_clamped
        clip_loss = torch.max(loss1, loss2)
        if self.ratio_clip_c is not None:
            loss3 = -advantages * self.ratio_clip_c
            clip_loss = torch.where(advantages < 0, torch.min(clip_loss, loss3), clip_loss)

        actor_importance_weights = torch.nan_to_num(torch.exp(prev_logprobs - generation_logprobs).detach(),
                                                    nan=0.0, posinf=0.0, neginf=0.0)
        is_oob_ratio = None
        kind = self.truncated_importance_sampling_type
        hi, lo = self.truncated_importance_sampling_ratio, self.truncated_importance_sampling_ratio_min
        if kind == "tis":
            lo = 0.0 if lo is None else lo
            oob = (actor_importance_weights > hi) | (actor_importance_weights < lo)
            is_oob_ratio = masked_mean(oob.to(mask.dtype), mask, global_valid_toks).item()
            actor_importance_weights = actor_importance_weights.clamp(min=lo, max=hi)
        elif kind == "icepop":
            inb = (actor_importance_weights >= lo) & (actor_importance_weights <= hi)
            is_oob_ratio = masked_mean((~inb).to(mask.dtype), mask, global_valid_toks).item()
            actor_importance_weights = actor_importance_weights * inb.to(actor_importance_weights.dtype)
        elif kind is not None:
            raise NotImplementedError(kind)  # seq-mask-tis: refused on the physical-trace path
        if self.use_importance_sampling_correction:
            importance_weights_to_use = actor_importance_weights
        else:
            importance_weights_to_use = torch.ones_like(prev_logprobs)

        actor_loss = masked_mean(importance_weights_to_use * clip_loss, mask, global_valid_toks)
        loss = actor_loss + kl

        with torch.no_grad():
            sampling_importance_ratio = masked_mean(actor_importance_weights, mask, global_valid_toks).item()
            approx_entropy = -masked_mean(torch.exp(curr_logprobs - generation_logprobs) * curr_logprobs, mask,
                                          global_valid_toks).item()
            keep = mask.bool()
            if keep.any():
                r_min, r_max = ratios.detach()[keep].min().item(), ratios.detach()[keep].max().item()
                rc_min, rc_max = ratios_clamped.detach()[keep].min().item(), ratios_clamped.detach()[keep].max().item()
            else:
                r_min = rc_min = float("inf")
                r_max = rc_max = float("-inf")
            metrics = {
                "loss": loss.item(),
                "actor_loss": actor_loss.item(),
                "kl_penalty": kl.item() / self.reference_policy_kl_penalty if self.reference_policy_kl_penalty else 0.0,
                "token_mult_prob_error": mult_prob_error,
                "gen_kl_error": gen_kl_error,
                "policy_kl_error": policy_kl_error,
                "js_divergence_error": js_divergence_error,
                "sampling_importance_ratio": sampling_importance_ratio,
                "approx_entropy": approx_entropy,
                "probs_ratio": masked_mean(ratios.detach(), mask, global_valid_toks).item(),
                "probs_ratio_clamped": masked_mean(ratios_clamped.detach(), mask, global_valid_toks).item(),
                "probs_ratio_min": r_min,
                "probs_ratio_max": r_max,
                "probs_ratio_clamped_min": rc_min,
                "probs_ratio_clamped_max": rc_max,
                "num_valid_samples": sample_mask.sum().item(),
            }
            if is_oob_ratio is not None:
                metrics["is_oob_ratio"] = is_oob_ratio
        return loss, metrics


def next_token_logprobs(policy, ids, images, routes) -> torch.Tensor:
    """[B, S-1]: column j = log p(ids[j+1] | ids[:j+1]); logits upcast to at least float32 (NeMo's prepare_loss_input)."""
    logits = policy(ids, images, routes).logits
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    return torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None].long()).squeeze(-1)


def get_grad_norm(params) -> torch.Tensor:
    grads = [p.grad for p in params if p.grad is not None]
    total = torch.zeros((), dtype=torch.float64)
    for g in grads:
        total = total + torch.norm(g.detach(), 2.0).to(torch.float64) ** 2
    return total ** 0.5


def clip_grad_by_total_norm_(params, max_grad_norm, total_norm) -> None:
    clip_coeff = max_grad_norm / (float(total_norm) + 1e-6)
    if clip_coeff < 1.0:
        for p in params:
            if p.grad is not None:
                p.grad.detach().mul_(clip_coeff)


def _driver_aggregate(all_mb_metrics: list[dict]) -> dict:
    """NeMo-RL's driver (§3.7): lists → one value per key."""
    lists: dict[str, list] = {}
    for m in all_mb_metrics:
        for k, v in m.items():
            lists.setdefault(k, []).append(v)
    out = {}
    for k, vals in lists.items():
        if k.endswith("_min") or k.endswith("_max"):
            finite = [v for v in vals if not math.isinf(v)]
            out[k] = (min(finite) if k.endswith("_min") else max(finite)) if finite else -1.0
        elif k in (M.LR, M.GLOBAL_VALID_SEQS, M.GLOBAL_VALID_TOKENS):
            out[k] = float(np.mean(vals))
        else:
            out[k] = float(np.sum(vals))
    return out


class Backend(ReferenceBackend):
    name = "fp-nemo-loss-fn"

    def train_step(self, state, batch, cfg):
        cfg = validate_physical_trace_training_config(cfg)
        check_batch(batch, cfg)
        policy, device, dtype = state.policy, state.device, state.dtype
        cdtype = torch.promote_types(dtype, torch.float32)
        step, trained_version = state.optimizer_steps, state.version
        loss_fn = ClippedPGLossFn(cfg.loss_fn)
        dp = batch.dp_size
        routes_all = batch.routed_experts.to(device) if cfg.policy.router_replay_enabled and batch.routed_experts is not None else None
        images = row_images(batch, dtype, device)
        data = {
            "input_ids": batch.row_input_ids.to(device).long(),
            "token_mask": batch.row_token_mask.to(device=device, dtype=cdtype),
            "sample_mask": batch.row_sample_mask.to(device=device, dtype=cdtype),
            "advantages": batch.row_advantages.to(device=device, dtype=cdtype),
            "generation_logprobs": batch.row_generation_logprobs.to(device=device, dtype=cdtype),
        }
        R, S = data["input_ids"].shape

        # global_valid_seqs / toks of the global batch: each rank's local count, then the DP all-reduce (a sum)
        local_toks = [(data["token_mask"][list(batch.rank_rows(k)), 1:] * data["sample_mask"][list(batch.rank_rows(k))][:, None]).sum()
                      for k in range(dp)]
        local_seqs = [data["sample_mask"][list(batch.rank_rows(k))].sum() for k in range(dp)]
        global_valid_toks = torch.stack(local_toks).sum()
        global_valid_seqs = torch.stack(local_seqs).sum()

        def lp_with_zero_column(model, rows):
            ids = data["input_ids"][rows]
            r = None if routes_all is None else routes_all[rows]
            nt = next_token_logprobs(model, ids, [images[i] for i in rows], r)
            return torch.cat([torch.zeros(len(rows), 1, dtype=nt.dtype, device=nt.device), nt], dim=1)

        # get_logprobs: no grad, the logprob batch = a whole dp shard at the batch's full width
        with torch.no_grad():
            prev = torch.zeros(R, S, dtype=cdtype, device=device)
            ref = torch.zeros(R, S, dtype=cdtype, device=device)
            for k in range(dp):
                rows = list(batch.rank_rows(k))
                if not rows:
                    continue
                prev[rows] = lp_with_zero_column(policy, rows)
                if cfg.loss_fn.reference_policy_kl_penalty != 0:
                    ref[rows] = lp_with_zero_column(state.reference, rows)
        data["prev_logprobs"] = prev
        data["reference_policy_logprobs"] = ref

        params = [p for p in policy.parameters() if p.requires_grad]
        state.optimizer.zero_grad()
        rank_grads = []
        all_mb_metrics: list[dict] = []
        mb_losses: list[float] = []
        lr = state.optimizer.param_groups[0]["lr"]
        for k in range(dp):
            for mb_rows in batch.microbatch_rows(k):
                rows = list(mb_rows)
                mb = {key: v[rows] for key, v in data.items()}
                ids = mb["input_ids"]
                r = None if routes_all is None else routes_all[rows]
                curr = next_token_logprobs(policy, ids, [images[i] for i in rows], r)
                loss, loss_metrics = loss_fn(curr, mb, global_valid_seqs, global_valid_toks)
                num_valid_samples = loss_metrics["num_valid_samples"]
                loss_metrics["lr"] = float(lr)
                loss_metrics["global_valid_seqs"] = global_valid_seqs.item()
                loss_metrics["global_valid_toks"] = global_valid_toks.item()
                (loss * dp).backward()  # FSDP averages the DP gradients: × dp_size cancels that mean
                if num_valid_samples > 0:
                    mb_losses.append(loss.item())
                    all_mb_metrics.append(loss_metrics)
            grads = []
            for p in params:
                grads.append(None if p.grad is None else p.grad.detach().clone())
                p.grad = None
            rank_grads.append(grads)
        for i, p in enumerate(params):  # the all-reduce: a mean over the DP ranks
            parts = [g[i] for g in rank_grads if g[i] is not None]
            if parts:
                p.grad = torch.stack([g if g is not None else torch.zeros_like(p) for g in (x[i] for x in rank_grads)]).sum(0) / dp

        grad_norm = get_grad_norm(params)
        if cfg.policy.max_grad_norm is not None:
            clip_grad_by_total_norm_(params, cfg.policy.max_grad_norm, grad_norm)
        updates, increments = step_once(state)

        metrics = _driver_aggregate(all_mb_metrics)
        metrics["loss"] = float(np.sum(mb_losses)) if mb_losses else 0.0
        metrics[M.GRAD_NORM] = float(grad_norm)
        metrics.setdefault(M.LR, float(lr))
        return finish(state, batch, step=step, trained_version=trained_version, train_metrics=metrics, prev=prev,
                      ref=ref if cfg.loss_fn.reference_policy_kl_penalty != 0 else None, routes_used=routes_all,
                      updates=updates, increments=increments)
