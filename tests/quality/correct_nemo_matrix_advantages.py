"""A CORRECT backend: GRPO advantages computed exactly as NeMo-RL writes them (nemo-rl-semantics §3.2-3.3), in
numpy float64: per group the n x n mask M (ones minus identity under leave-one-out), m = n - loo,
b = M r / m, sq = M r^2 / m, std = sqrt((sq - b^2) m/(m-1)) with NaN -> 0, A = r - b, divided by std + 1e-6 only
where std > 0; a group of <= 1 gets 0; then advantage_clip_low/high. The reference computes the std in two passes
(fsum of squared deviations); this is the one-pass matrix form, different rounding."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from compactsim.harness.pipeline.advantages import compute_logical_advantages
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.materializer import prepare_trace_batch

SCENARIO = "no-leave-one-out-baseline"


def nemo_grpo(rewards, *, loo: bool, normalize: bool) -> np.ndarray:
    r = np.asarray(rewards, dtype=np.float64)
    n = r.size
    if n <= 1:
        return np.zeros(n)
    M = np.ones((n, n)) - (np.eye(n) if loo else 0.0)
    m = n - int(loo)
    b = M @ r / m
    sq = M @ (r * r) / m
    with np.errstate(invalid="ignore", divide="ignore"):
        std = np.nan_to_num(np.sqrt((sq - b * b) * m / (m - 1)), nan=0.0) if m > 1 else np.zeros(n)
    adv = r - b
    if normalize:
        adv = np.where(std > 0, adv / (std + 1e-6), adv)
    return adv


class Backend(ReferenceBackend):
    name = "correct-nemo-matrix-advantages"

    def materialize(self, plans, cfg):
        acfg = cfg.advantage_config()
        ref = compute_logical_advantages([p.evidence for p in plans], acfg)
        raw = np.zeros(len(ref.advantages))
        groups: dict[str, list[int]] = {}
        for k, key in enumerate(ref.group_keys):
            groups.setdefault(key, []).append(k)
        for idx in groups.values():
            raw[idx] = nemo_grpo([ref.rewards[k] for k in idx], loo=acfg.use_leave_one_out_baseline,
                                 normalize=acfg.normalize_rewards)
        clipped = raw
        if acfg.advantage_clip_low is not None or acfg.advantage_clip_high is not None:
            clipped = np.clip(raw, acfg.advantage_clip_low, acfg.advantage_clip_high)
        logical = replace(ref, advantages=tuple(map(float, clipped)), unclipped_advantages=tuple(map(float, raw)))
        return prepare_trace_batch(plans, None, logical, cfg.materialize_config())
