"""Broken backend: a sample-counting LR schedule (Megatron's ``scheduler.step(increment=...)``, warmup given in
samples = ``lr_warmup_steps × train_global_batch_size``) that each rank advances by the samples *it* trained,
``micro_batch_size × num_microbatches = global_batch / dp_size``, instead of the global batch size.

On one rank the two agree, so every single-rank warmup is exactly right. Under ``dp_size > 1`` the warmup runs
``dp_size`` times too long: the learning rate of increment n is ``min(1, (n+1)/(warmup·dp))·lr`` instead of
``min(1, (n+1)/warmup)·lr``. NeMo-RL's Megatron worker calls ``scheduler.step(increment=gbs)`` — the *global*
batch — once per ``train()`` so that "one tick == one train() call" (nemo-rl-semantics §3.7, §9.7); the scheduler
still steps exactly once per logical batch here, so every counter is right and only the rate is off.
"""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.lr"
SCENARIO = "layout-dp2-warmup-weight-decay"


class _RankSampleWarmup:
    def __init__(self, warmup: int, global_batch: int, dp_size: int) -> None:
        self.warmup_samples = warmup * global_batch
        self.per_rank = global_batch // dp_size  # samples this rank trains per step

    def __call__(self, n: int) -> float:
        return 1.0 if self.warmup_samples == 0 else min(1.0, (n + 1) * self.per_rank / self.warmup_samples)


class Backend(ReferenceBackend):
    name = "warmup-counted-in-rank-samples"

    def train_step(self, state, batch, cfg):
        sched = state.scheduler
        if not isinstance(sched.lr_lambdas[0], _RankSampleWarmup):  # the trainer's own schedule, built at its start
            p = cfg.policy
            sched.lr_lambdas[0] = _RankSampleWarmup(p.lr_warmup_steps, p.train_global_batch_size, p.dp_size)
            for group, base in zip(state.optimizer.param_groups, sched.base_lrs, strict=True):
                group["lr"] = base * sched.lr_lambdas[0](sched.last_epoch)
        return super().train_step(state, batch, cfg)
