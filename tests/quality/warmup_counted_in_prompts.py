"""Broken backend: a sample-counting LR warmup that counts prompts, not optimizer steps.

The trainer's scheduler measures progress in prompts taken from the dataloader (``scheduler.step(increment=
num_prompts_per_step)``, Megatron's sample-counting `OptimizerParamScheduler` fed the prompt batch size) while its
warmup length is `policy.lr_warmup_steps` taken as is, in optimizer steps. With one prompt per step the two agree;
with P prompts the warmup runs P times too fast — the K-times-too-fast schedule of ROLL #409. The scheduler still
steps exactly once per logical batch, so every counter is right; only the rate during warmup is off.
Every warmup scenario of the catalogue trained one prompt group per step (`groups: 1`).
"""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.lr"
SCENARIO = "warmup-two-prompt-groups"


class _PromptWarmup:
    def __init__(self, warmup: int) -> None:
        self.warmup = warmup
        self.prompts_at = {0: 0}  # scheduler increments -> prompts consumed so far
        self.per_step = 1

    def __call__(self, n: int) -> float:
        if self.warmup == 0:
            return 1.0
        seen = self.prompts_at.get(n, n * self.per_step)
        return min(1.0, (seen + self.per_step) / self.warmup)


class Backend(ReferenceBackend):
    name = "warmup-counted-in-prompts"

    def train_step(self, state, batch, cfg):
        sched = state.scheduler
        lam = sched.lr_lambdas[0]
        prompts = cfg.grpo.num_prompts_per_step
        if not isinstance(lam, _PromptWarmup):  # the trainer's own schedule, built at its start
            lam = sched.lr_lambdas[0] = _PromptWarmup(cfg.policy.lr_warmup_steps)
            lam.per_step = prompts
            for group, base in zip(state.optimizer.param_groups, sched.base_lrs, strict=True):
                group["lr"] = base * lam(sched.last_epoch)
        n = sched.last_epoch
        lam.prompts_at[n + 1] = lam.prompts_at.get(n, n * prompts) + prompts
        return super().train_step(state, batch, cfg)
