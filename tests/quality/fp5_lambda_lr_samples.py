"""A CORRECT backend (false-positive hunt 5): the warmup as a `LambdaLR` over sample counts.

Trainers that count their schedule in samples (Megatron's `OptimizerParamScheduler` with `lr_warmup_samples`,
NeMo's sample-based configs) write the linear warmup as samples seen after this step over warmup samples,
`min(1, (e + 1)·B / (W·B))` with B = prompts × generations per step: the same factor as `min(1, (e + 1)/W)`. It is
installed over the state's optimizer at the current epoch, with the rate that epoch already has, and stepped once
per optimizer step like any scheduler.
"""

from __future__ import annotations

import torch

from compactsim.harness.pipeline.backend import ReferenceBackend

SCENARIO = "warmup-two-prompt-groups"


class _SampleWarmup:
    def __init__(self, warmup_steps: int, samples_per_step: int) -> None:
        self.warmup_samples = warmup_steps * samples_per_step
        self.samples_per_step = samples_per_step

    def __call__(self, epoch: int) -> float:
        if self.warmup_samples == 0:
            return 1.0
        seen = (epoch + 1) * self.samples_per_step
        return 1.0 if seen >= self.warmup_samples else seen / self.warmup_samples


class Backend(ReferenceBackend):
    name = "fp5-lambda-lr-samples"

    def train_step(self, state, batch, cfg):
        sched = state.scheduler
        if not isinstance(getattr(sched, "lr_lambdas", [None])[0], _SampleWarmup):
            epoch = int(sched.last_epoch)
            g = cfg.grpo
            fn = _SampleWarmup(cfg.policy.lr_warmup_steps, g.num_prompts_per_step * g.num_generations_per_prompt)
            new = torch.optim.lr_scheduler.LambdaLR(state.optimizer, fn)
            new.last_epoch = epoch
            for group in state.optimizer.param_groups:
                group["lr"] = group["initial_lr"] * fn(epoch)
            new._last_lr = [group["lr"] for group in state.optimizer.param_groups]
            state.scheduler = new
        return super().train_step(state, batch, cfg)
