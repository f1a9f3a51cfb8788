"""A CORRECT backend (false-positive hunt 5): the narrow rewrites of this hunt at once, each equivalent on its own.

- plan: NeMo-RL's `nrlre1` route envelopes decoded by the trainer with `torch.frombuffer` (fp5_nrlre1_torch_decode);
- materialize: GRPO advantages in torch float64, two-pass, equal rewards tested first (fp5_torch_advantages);
- train_step: the optimizer rebuilt as `torch.optim.Adam(decoupled_weight_decay=True, foreach=True)` with betas a
  YAML list, one param group per parameter (layer-wise lr decay at factor 1), and the warmup a `LambdaLR` over
  sample counts (fp5_adam_decoupled, fp5_per_param_groups, fp5_lambda_lr_samples); the reference step otherwise.
"""

from __future__ import annotations

import torch

from compactsim.harness.pipeline.backend import ReferenceBackend
from tests.quality import fp5_nrlre1_torch_decode, fp5_torch_advantages
from tests.quality.fp5_lambda_lr_samples import _SampleWarmup

SCENARIO = "routes-nrlre1-three-layers-top2"


class Backend(ReferenceBackend):
    name = "fp5-combo-optimizer-ingest"

    plan = fp5_nrlre1_torch_decode.Backend.plan
    materialize = fp5_torch_advantages.Backend.materialize

    def train_step(self, state, batch, cfg):
        opt = state.optimizer
        if type(opt) is not torch.optim.Adam:
            old = opt.param_groups[0]
            epoch = int(state.scheduler.last_epoch)
            g = cfg.grpo
            fn = _SampleWarmup(cfg.policy.lr_warmup_steps, g.num_prompts_per_step * g.num_generations_per_prompt)
            groups = [{"params": [p], "name": name, "initial_lr": old["initial_lr"],
                       "lr": old["initial_lr"] * fn(epoch)} for name, p in state.policy.named_parameters()]
            new = torch.optim.Adam(groups, lr=old["initial_lr"], betas=[0.9, 0.999], eps=1e-8,
                                   weight_decay=cfg.policy.weight_decay, decoupled_weight_decay=True, foreach=True)
            for p, st in opt.state.items():
                new.state[p] = st
            sched = torch.optim.lr_scheduler.LambdaLR(new, fn)
            sched.last_epoch = epoch
            for grp in new.param_groups:
                grp["lr"] = grp["initial_lr"] * fn(epoch)
            sched._last_lr = [grp["lr"] for grp in new.param_groups]
            state.optimizer, state.scheduler = new, sched
        return super().train_step(state, batch, cfg)
