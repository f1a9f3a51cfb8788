"""A hand-written AdamW step, as trainers write their own: torch's decoupled update, its state keys and β2 chosen.

Broken backends and audit unit tests bend it one way each (state kept under other keys, a β2 of its
own); with the defaults it is `torch.optim.AdamW`'s update (`foreach=False`) up to rounding.
"""

from __future__ import annotations

import math

import torch


@torch.no_grad()
def adamw_step(optimizer: torch.optim.Optimizer, *, keys: tuple[str, str] = ("exp_avg", "exp_avg_sq"),
               beta2: float | None = None, grads: dict[torch.nn.Parameter, torch.Tensor] | None = None) -> None:
    """One update of every parameter with a gradient (`grads[p]` when given, else `p.grad`).

    State per parameter: `step` and the two moments under `keys`; `beta2` replaces the group's β2 in
    the arithmetic (the group keeps what it says).
    """
    first, second = keys
    for group in optimizer.param_groups:
        b1, group_b2 = group["betas"]
        b2 = group_b2 if beta2 is None else beta2
        for p in group["params"]:
            g = p.grad if grads is None else grads.get(p)
            if g is None:
                continue
            st = optimizer.state[p]
            if not st:
                st.update({"step": torch.tensor(0.0), first: torch.zeros_like(p), second: torch.zeros_like(p)})
            st["step"] += 1
            t = float(st["step"])
            p.mul_(1 - group["lr"] * group["weight_decay"])
            st[first].lerp_(g, 1 - b1)
            st[second].mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = (st[second].sqrt() / math.sqrt(1 - b2**t)).add_(group["eps"])
            p.addcdiv_(st[first], denom, value=-group["lr"] / (1 - b1**t))
