"""The oracle's own optimizer: gradient clipping, the learning-rate schedule and AdamW, in float64.

Formulas (each the documented semantics, written out here so a trainer's optimizer is compared
with arithmetic, not with another call to the same library):

- **Gradient norm and clipping** (what NeMo-RL's workers do with `torch.nn.utils.clip_grad_norm_`):
  ``‖g‖ = sqrt(Σ_p Σ g_p²)`` over every parameter; with ``max_grad_norm = c``, every gradient is
  multiplied by ``min(1, c / (‖g‖ + 1e-6))``. The reported norm is the one *before* clipping.
- **Learning rate** after ``n`` scheduler increments: ``lr_n = lr · min(1, (n + 1) / warmup)``,
  or ``lr`` without warmup (compactsim's linear-warmup schedule, one increment per logical batch:
  nemo-rl-semantics §3.7 — the schedule advances once per `train()` call, never per row).
- **AdamW** (decoupled weight decay, Loshchilov & Hutter; the update `torch.optim.AdamW` documents),
  at step ``t = 1, 2, ...``::

      p ← p · (1 − lr·λ)
      m ← β1·m + (1 − β1)·g          v ← β2·v + (1 − β2)·g²
      p ← p − lr · (m / (1 − β1^t)) / (sqrt(v) / sqrt(1 − β2^t) + ε)

  ``t`` is each parameter's own update count, as torch keeps it.
- **A parameter no row reached** (autograd leaves its gradient None: the image patch projection on a
  text-only batch) is updated one of two ways, both correct: with ``g = 0`` (its moments decay, its
  weight decays), as FSDP's flat and Megatron's contiguous gradient buffers hand it to the
  optimizer; or not at all (weights, moments and ``t`` unchanged), as `torch.optim.AdamW` treats a
  ``.grad`` left None by a plain loop. The trainer's choice is read from its own per-parameter
  counters (`skip` in `adamw_update`); skipping a parameter a row reached is a bug the audit names.
- **Weight decay** ``λ`` is the configured one on every parameter (`torch.optim.AdamW(model.parameters())`,
  NeMo-RL's DTensor path), or, when the trainer's own param groups show exactly Megatron-core's
  default convention, 0 on biases and 1-D parameters (norms) and the configured one elsewhere
  (`megatron_no_decay`; NeMo-RL's Megatron path, same config). Any other pattern is judged against
  the configured decay everywhere (`weight_decays`).

The state (moments and step counts) is the oracle's own: it starts from zeros and is carried from
step to step from the oracle's gradients, never read back from a trainer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

from compactsim.harness.oracle.step_settings import OptimizerSettings

#: Added to the norm before dividing (torch's clip_grad_norm_ and so NeMo-RL's workers).
CLIP_EPS = 1e-6


@dataclass(slots=True)
class AdamState:
    """AdamW moments and update counts per parameter name (absent: no update yet)."""

    steps: dict[str, int] = field(default_factory=dict)
    exp_avg: dict[str, torch.Tensor] = field(default_factory=dict)
    exp_avg_sq: dict[str, torch.Tensor] = field(default_factory=dict)


def learning_rate(settings: OptimizerSettings, increments: int) -> float:
    """The learning rate after `increments` scheduler increments."""
    if settings.lr_warmup_steps <= 0:
        return settings.learning_rate
    return settings.learning_rate * min(1.0, (increments + 1) / settings.lr_warmup_steps)


def global_norm(grads: Mapping[str, torch.Tensor]) -> float:
    """L2 norm of all gradients together, in float64."""
    return math.sqrt(math.fsum(float((g.to(torch.float64) ** 2).sum()) for g in grads.values()))


def clip_coefficient(norm: float, max_norm: float | None) -> float | None:
    """The factor clipping scales the gradient by, ``min(1, max_norm / (norm + 1e-6))`` (torch's
    `clip_grad_norm_`, which NeMo-RL calls); None when clipping is off."""
    return None if max_norm is None else min(1.0, max_norm / (norm + CLIP_EPS))


def clip(grads: Mapping[str, torch.Tensor], max_norm: float | None) -> tuple[dict[str, torch.Tensor], float]:
    """(clipped gradients, norm before clipping)."""
    norm = global_norm(grads)
    scale = clip_coefficient(norm, max_norm)
    if scale is None:
        return dict(grads), norm
    return {k: g * scale for k, g in grads.items()}, norm


def megatron_no_decay(name: str, shape: Sequence[int]) -> bool:
    """Megatron-core's default no-decay rule (``_get_param_groups`` without a ``no_weight_decay_cond``):
    biases (``*.bias``) and every 1-D parameter."""
    return name.endswith(".bias") or len(shape) == 1


def weight_decays(params: Mapping[str, torch.Tensor], configured: float,
                  trainer: Mapping[str, float] | None) -> dict[str, float]:
    """Each parameter's decoupled weight decay: `configured` everywhere, or Megatron's convention
    (`megatron_no_decay` parameters at 0) when the trainer's param groups (`trainer`: name → λ, as the
    harness read them) show exactly that."""
    everywhere = {name: configured for name in params}
    if trainer is None or configured == 0.0:
        return everywhere
    megatron = {name: 0.0 if megatron_no_decay(name, p.shape) else configured for name, p in params.items()}
    return megatron if dict(trainer) == megatron else everywhere


def adamw_update(
    params: Mapping[str, torch.Tensor],
    grads: Mapping[str, torch.Tensor],
    state: AdamState,
    settings: OptimizerSettings,
    lr: float,
    *,
    skip: frozenset[str] = frozenset(),
    decays: Mapping[str, float] | None = None,
) -> tuple[dict[str, torch.Tensor], AdamState]:
    """(parameters after one AdamW step, the new state); inputs are left untouched.

    Parameters named in `skip` keep their weights, moments and count (torch's AdamW on a None gradient).
    `decays` gives each parameter's λ (`weight_decays`); None: the configured one on every parameter.
    """
    b1, b2 = settings.betas
    new = AdamState()
    out: dict[str, torch.Tensor] = {}
    for name, p in params.items():
        p64 = p.to(torch.float64)
        if name in skip:
            out[name] = p64.clone()
            if name in state.steps:
                new.steps[name] = state.steps[name]
                new.exp_avg[name], new.exp_avg_sq[name] = state.exp_avg[name], state.exp_avg_sq[name]
            continue
        t = state.steps.get(name, 0) + 1
        g = grads.get(name)
        g = torch.zeros_like(p64) if g is None else g.to(torch.float64)
        m = state.exp_avg.get(name, torch.zeros_like(p64)) * b1 + (1.0 - b1) * g
        v = state.exp_avg_sq.get(name, torch.zeros_like(p64)) * b2 + (1.0 - b2) * g * g
        decayed = p64 * (1.0 - lr * (settings.weight_decay if decays is None else decays[name]))
        out[name] = decayed - lr * (m / (1.0 - b1**t)) / (v.sqrt() / math.sqrt(1.0 - b2**t) + settings.eps)
        new.steps[name] = t
        new.exp_avg[name] = m
        new.exp_avg_sq[name] = v
    return out, new


__all__ = ["CLIP_EPS", "AdamState", "adamw_update", "clip", "clip_coefficient", "global_norm", "learning_rate", "megatron_no_decay",
           "weight_decays"]
