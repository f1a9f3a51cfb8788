"""Broken backend: a Megatron-style sample-counting LR schedule (warmup given in samples,
``lr_warmup_steps x train_global_batch_size``) advanced by the number of rows of the trained batch
(``scheduler.step(increment=data.size)``) instead of the logical batch size.

Before the physical-trace split a batch held one row per rollout, so the two were the same. With compaction a step
holds more rows than rollouts and the warmup runs faster than configured. The scheduler still steps exactly once
per logical batch, so every counter is right; only the rate of later steps is off, and only during a warmup.
No warmup scenario of the catalogue splits a rollout (or pads a row).
"""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.lr"
SCENARIO = "warmup-under-compaction"


class _SampleWarmup:
    def __init__(self, warmup: int, global_batch: int) -> None:
        self.warmup_samples = warmup * global_batch
        self.global_batch = global_batch
        self.samples_at = {0: 0}  # scheduler increments -> samples consumed so far

    def __call__(self, n: int) -> float:
        if self.warmup_samples == 0:
            return 1.0
        seen = self.samples_at.get(n, n * self.global_batch)
        return min(1.0, (seen + self.global_batch) / self.warmup_samples)


class Backend(ReferenceBackend):
    name = "warmup-samples-counted-in-rows"

    def train_step(self, state, batch, cfg):
        sched = state.scheduler
        lam = sched.lr_lambdas[0]
        if not isinstance(lam, _SampleWarmup):  # the trainer's own schedule, built at its start
            p = cfg.policy
            lam = sched.lr_lambdas[0] = _SampleWarmup(p.lr_warmup_steps, p.train_global_batch_size)
            for group, base in zip(state.optimizer.param_groups, sched.base_lrs, strict=True):
                group["lr"] = base * lam(sched.last_epoch)
        n = sched.last_epoch
        lam.samples_at[n + 1] = lam.samples_at.get(n, n * lam.global_batch) + int(batch.row_input_ids.shape[0])
        return super().train_step(state, batch, cfg)
