"""The oracle's training step: loss, gradient, gradient norm, learning rate and updated weights, in float64.

For every optimizer step the harness measured (`compactsim.harness.core.training_state`), the oracle takes
its *own* expected rows (`compactsim.harness.oracle.rows`), the weights the harness held before the backend's
step, the scenario's loss and optimizer settings, and its own optimizer state carried from the
previous step, and computes what a correct trainer must have done:

1. the tiny policy's forward pass on each expected row (the simulated world: shared with the
   pipeline, DESIGN §6a) with the row's own images and, under router replay, the oracle's own
   expected routes; the reference policy (the harness's weights before step 0) when the KL
   penalty is on: while those are bit for bit the weights before this step (step 0), the
   reference logprobs are the policy's own, detached, without a second forward;
2. the loss with NeMo-RL's clipped-PG semantics (`compactsim.harness.oracle.step_loss`), token level,
   normalised once by the global trained-token count ``N = Σ_rows sample_mask · |trained tokens|``
   (+1e-8): nemo-rl-semantics §4.6, where per-micro-batch losses divided by the global count sum
   to exactly this;
3. its gradient by autograd on a float64 copy of the weights, the norm before clipping, clipping,
   the learning rate, and the AdamW update (`compactsim.harness.oracle.optimizer`);
4. the loss's reported diagnostics — ratio means and extrema, importance-sampling ratio and
   out-of-bounds share, mismatch KLs, JS divergence, approximate entropy, valid samples — from the
   same trained tokens (`compactsim.harness.oracle.step_metrics`, nemo-rl-semantics §4.6).

The forward pass runs one row at a time: the oracle needs no micro-batching, padding or
data-parallel layout, so a trainer whose accumulation or normalisation depends on them disagrees.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict

import numpy as np
import torch

from compactsim.harness.core.errors import ConfigError
from compactsim.harness.core.expectations import ExpectedRow
from compactsim.harness.core.expectations import ExpectedTrainingStep as StepTruth
from compactsim.harness.core.policy import TinyPolicy
from compactsim.harness.oracle.rows import decode_rgb
from compactsim.harness.oracle.optimizer import AdamState, adamw_update, clip, clip_coefficient, learning_rate, weight_decays
from compactsim.harness.oracle.step_loss import NORMALIZER_EPS, row_loss
from compactsim.harness.oracle.step_metrics import RowTokens, loss_metrics
from compactsim.harness.oracle.step_settings import StepSettings


def decode_pixels(data_url: str) -> torch.Tensor:
    """A data-URL image as (3, H, W) float64 RGB values k/255 (the pixels `decode_rgb` reads)."""
    rgb = decode_rgb(data_url).astype(np.float64)  # (H, W, 3)
    return torch.from_numpy(rgb / 255.0).permute(2, 0, 1).contiguous()


def _model(config: object, weights: Mapping[str, torch.Tensor], *, grad: bool) -> TinyPolicy:
    model = TinyPolicy(config).to(torch.float64)  # type: ignore[arg-type]
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(weights[name])
    model.train(grad)
    return model.requires_grad_(grad)


def _same(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> bool:
    """Equal values under the same names, so `_model` builds the same float64 model from both (a float32 copy of
    float64 weights is equal only where it holds them exactly; a NaN is never equal)."""
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _row_logprobs(model: TinyPolicy, row: ExpectedRow, images: Sequence[torch.Tensor], routes: bool) -> torch.Tensor:
    """Logprobs of the row's trained tokens, in position order (carries the gradient when the model does)."""
    ids = torch.tensor([row.input_ids], dtype=torch.long)
    replay = None
    if routes and row.routes is not None:
        replay = torch.from_numpy(np.ascontiguousarray(row.routes, dtype=np.int64))[None]
    lp = model.token_logprobs(ids, [list(images)], replay)[0]  # (T,) own-position
    return lp[list(row.trainable_positions)]


def expected_step(
    step: int,
    rows: Sequence[ExpectedRow],
    pixels: Mapping[str, torch.Tensor],
    weights_before: Mapping[str, torch.Tensor],
    model_config: object,
    settings: StepSettings,
    state: AdamState,
    *,
    reference_weights: Mapping[str, torch.Tensor] | None,
    scheduler_increments: int,
    skipped: frozenset[str] = frozenset(),
    trainer_decays: Mapping[str, float] | None = None,
) -> tuple[StepTruth, AdamState]:
    """One step's truth and the oracle's optimizer state after it (see the module docstring).

    `skipped` names the parameters the trainer's update left out (measured from its own counters):
    those no row reached keep their weights and state, as `torch.optim.AdamW` leaves a None gradient;
    the others are expected to take their update (`compactsim.harness.oracle.optimizer`).
    `trainer_decays` is each parameter's weight decay in the trainer's own param groups (measured):
    Megatron's no-decay convention is followed when it shows exactly that (`weight_decays`).
    """
    loss_settings = settings.loss
    beta = loss_settings.reference_policy_kl_penalty
    if beta != 0 and reference_weights is None:
        raise ConfigError("invalid_argument", "the KL penalty is on: the reference weights are needed")
    trained = [r for r in rows if r.sample_mask != 0 and r.mask_spans]
    n_tokens = float(sum(r.sample_mask * len(r.trainable_positions) for r in trained))
    denominator = n_tokens + NORMALIZER_EPS

    policy = _model(model_config, weights_before, grad=True)
    with_reference = bool(beta != 0 and reference_weights)
    reference_is_policy = with_reference and _same(reference_weights, weights_before)  # type: ignore[arg-type]
    reference = _model(model_config, reference_weights, grad=False) if with_reference and not reference_is_policy else None
    actor_total = 0.0
    kl_total = 0.0
    prob_error_total = 0.0
    row_tokens: dict[int, RowTokens] = {}  # id(row) → its trained tokens, for the loss metrics
    for row in trained:
        missing = [m for m in row.media_ids if m not in pixels]
        if missing:
            raise ConfigError("invalid_argument", f"row {row.physical_trace_id!r}: media {missing} are in no "
                              "ground-truth media table")
        images = [pixels[m] for m in row.media_ids]
        lp = _row_logprobs(policy, row, images, settings.router_replay)
        gen = torch.tensor(row.generation_logprobs, dtype=torch.float64)
        ref = None
        if reference_is_policy:
            ref = lp.detach()
        elif reference is not None:
            with torch.no_grad():
                ref = _row_logprobs(reference, row, images, settings.router_replay)
        contrib = row_loss(lp, gen, ref, row.advantage, loss_settings)
        weighted = (contrib.actor_sum + contrib.kl_sum) * row.sample_mask / denominator
        weighted.backward()
        actor_total += float(contrib.actor_sum.detach()) * row.sample_mask
        kl_total += float(contrib.kl_sum.detach()) * row.sample_mask
        prob_error_total += float(torch.exp((gen - lp.detach()).abs()).sum()) * row.sample_mask
        row_tokens[id(row)] = RowTokens(lp.detach(), gen, row.sample_mask)

    unreached = frozenset(name for name, p in policy.named_parameters() if p.grad is None)
    grads = {name: (p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p))
             for name, p in policy.named_parameters()}
    clipped, norm = clip(grads, settings.optimizer.max_grad_norm)
    lr = learning_rate(settings.optimizer, scheduler_increments)
    decays = weight_decays(weights_before, settings.optimizer.weight_decay, trainer_decays)
    after, new_state = adamw_update(weights_before, clipped, state, settings.optimizer, lr, skip=skipped & unreached,
                                    decays=decays)
    actor_loss = actor_total / denominator
    kl_loss = kl_total / denominator
    empty = torch.zeros(0, dtype=torch.float64)
    n_seqs = float(sum(r.sample_mask for r in rows))
    diagnostics = loss_metrics(
        [row_tokens.get(id(r), RowTokens(empty, empty, r.sample_mask)) for r in rows], loss_settings,
        n_tokens=n_tokens, n_seqs=n_seqs,
    )
    truth = StepTruth(
        step=step,
        loss=actor_loss + kl_loss,
        actor_loss=actor_loss,
        kl_penalty=kl_loss / beta if beta != 0 else 0.0,
        grad_norm=norm,
        lr=lr,
        global_valid_tokens=n_tokens,
        global_valid_seqs=n_seqs,
        token_mult_prob_error=prob_error_total / denominator,
        **asdict(diagnostics),
        params_after=after,
        clipped_gradient=clipped,
        clip_coefficient=clip_coefficient(norm, settings.optimizer.max_grad_norm),
        unreached=unreached,
        adam_betas=tuple(settings.optimizer.betas),
        adam_eps=settings.optimizer.eps,
        weight_decays=dict(decays),
    )
    return truth, new_state


__all__ = ["StepTruth", "decode_pixels", "expected_step"]
