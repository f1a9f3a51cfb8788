"""A CORRECT backend: Megatron-core's full param-group keying and a plain LambdaLR closure (false-positive hunt 2).

Megatron-core's `_get_param_groups` keys groups by (weight-decay multiplier, lr multiplier, is_expert_parallel, ...):
with an MoE model it builds FOUR groups, dense/expert x decay/no-decay, the no-decay rule being its default one
(every ``*.bias`` and every 1-D parameter at λ = 0; NeMo-RL's Megatron path under the same config). Expert parameters
(the experts' ``w_in``/``b_in``/``w_out``/``b_out``) live in their own groups because Megatron reduces their
gradients over the expert-data-parallel group. All groups share lr, betas, eps, and lr/wd multipliers of 1.

Before its first update the backend rebuilds the AdamW over those groups (listed expert-first, no-decay-first, so the
parameter order inside the optimizer differs from `model.parameters()`) and the warmup as a `LambdaLR` over a plain
closure ``lambda n: min(1, (n + 1) / W)`` (1 without warmup): the same rates as the handed scheduler. The step itself
zeroes gradients with ``zero_grad(set_to_none=False)`` and clips with ``clip_grad_norm_(foreach=False,
error_if_nonfinite=True)`` over the optimizer's own parameter order; the rest of the step is the reference's.
"""

from __future__ import annotations

import torch

from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.backend import ReferenceBackend

SCENARIO = "layout-dp2-warmup-weight-decay"

_EXPERT_PARAMS = ("w_in", "b_in", "w_out", "b_out")


def megatron_moe_groups(policy: torch.nn.Module, weight_decay: float) -> list[dict]:
    keyed: dict[tuple[bool, bool], list] = {}
    for name, p in policy.named_parameters():
        is_expert = name.rsplit(".", 1)[-1] in _EXPERT_PARAMS
        no_wd = name.endswith(".bias") or p.dim() == 1
        keyed.setdefault((is_expert, no_wd), []).append(p)
    groups = []
    for (is_expert, no_wd) in sorted(keyed, key=lambda k: (not k[0], not k[1])):
        groups.append({"params": keyed[(is_expert, no_wd)], "weight_decay": 0.0 if no_wd else weight_decay,
                       "is_expert_parallel": is_expert, "wd_mult": 0.0 if no_wd else 1.0, "lr_mult": 1.0})
    return groups


def warmup_closure(warmup: int):
    return lambda n: 1.0 if warmup == 0 else min(1.0, (n + 1) / warmup)


class _Clip:
    """T._clip_grad_norm replaced for the duration of a step: torch's clip with foreach=False, error_if_nonfinite."""

    def __init__(self, optimizer):
        self.params = [p for g in optimizer.param_groups for p in g["params"]]

    def __call__(self, params, max_norm):
        order = self.params  # the optimizer's order, not the model's
        if max_norm is None:
            return float(torch.nn.utils.get_total_norm([p.grad for p in order if p.grad is not None],
                                                       error_if_nonfinite=True, foreach=False))
        return float(torch.nn.utils.clip_grad_norm_(order, max_norm, foreach=False, error_if_nonfinite=True))


class Backend(ReferenceBackend):
    name = "fp-megatron-expert-groups"

    def train_step(self, state, batch, cfg):
        old = state.optimizer
        if len(old.param_groups) == 1 and not old.state:  # before the first update: nothing to carry over
            g = old.param_groups[0]
            opt = torch.optim.AdamW(megatron_moe_groups(state.policy, g["weight_decay"]), lr=g["initial_lr"],
                                    betas=g["betas"], eps=g["eps"], foreach=False)
            state.optimizer = opt
            state.scheduler = torch.optim.lr_scheduler.LambdaLR(opt, warmup_closure(cfg.policy.lr_warmup_steps))
        opt = state.optimizer
        zero_grad = opt.zero_grad
        opt.zero_grad = lambda set_to_none=True: zero_grad(set_to_none=False)  # Megatron keeps its grad buffers
        clip = T._clip_grad_norm
        T._clip_grad_norm = _Clip(opt)
        try:
            return T.train_step(state, batch, cfg)
        finally:
            T._clip_grad_norm = clip
            del opt.zero_grad
