"""Broken backend: Megatron-style "no weight decay for biases and 1-D parameters" decided with ``p.dim() == 1`` on the
parameters the optimizer is built over, which under data parallelism are FSDP's *flattened* parameters
(``use_orig_params=False``: every shard is a 1-D ``FlatParameter``).

On one rank the groups are Megatron-core's default (every ``*.bias`` and 1-D parameter at λ = 0, the rest decayed),
which NeMo-RL's Megatron path runs and the audit accepts (`correct_megatron_no_decay_group`). Under ``dp_size > 1``
every parameter looks 1-D, so the whole model lands in the no-decay group and ``policy.weight_decay`` silently
never reaches the weights. NeMo-RL's DTensor path decays every parameter as ``AdamW(model.parameters())`` builds it;
its Megatron path spares exactly the biases and the norms (README "Checking another trainer"), never the matrices.
"""

from __future__ import annotations

import torch

from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.update"
SCENARIO = "layout-dp2-warmup-weight-decay"


def groups(policy: torch.nn.Module, weight_decay: float, flattened: bool) -> list[dict]:
    decay, no_decay = [], []
    for name, p in policy.named_parameters():
        ndim = 1 if flattened else p.dim()  # FSDP FlatParameter: every parameter the optimizer sees is 1-D
        (no_decay if name.endswith(".bias") or ndim == 1 else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


class Backend(ReferenceBackend):
    name = "no-decay-by-ndim-on-flat-params"

    def train_step(self, state, batch, cfg):
        old = state.optimizer
        if len(old.param_groups) == 1 and not old.state:  # before the first update: nothing to carry over
            group = old.param_groups[0]
            opt = torch.optim.AdamW(groups(state.policy, group["weight_decay"], cfg.policy.dp_size > 1),
                                    lr=group["initial_lr"], betas=group["betas"], eps=group["eps"], foreach=False)
            state.optimizer = opt
            state.scheduler = torch.optim.lr_scheduler.LambdaLR(opt, state.scheduler.lr_lambdas[0])
        return super().train_step(state, batch, cfg)
