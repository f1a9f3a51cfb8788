"""Broken backend: rewards are rounded to bfloat16 before the GRPO baseline (the rollout buffer keeps every
per-sample float — rewards included — as ``torch.bfloat16`` to halve host memory, and the advantage is computed
from the stored value).

bfloat16 keeps 8 significant bits, so rewards like 1, 0, 0.5 or 0.25 survive exactly and every advantage is
right; a graded reward such as 0.7, 1/3 or a reward-model score comes back rounded (0.7 → 0.69921875) and every
baseline, std and advantage of its group moves with it (~1e-3 relative). NeMo-RL's reward tensors are float32
(`total_reward = tensor(full_result["reward"])`, nemo-rl-semantics §1.10; `correct_float32_advantages` passes in
float32 runs), 2^-24-accurate, never bfloat16.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "row.advantage"
SCENARIO = "rewards-beyond-unit-interval"


def _bf16(x):
    return None if x is None else float(torch.tensor(float(x), dtype=torch.float64).to(torch.bfloat16).double())


class Backend(ReferenceBackend):
    name = "rewards-stored-in-bfloat16"

    def materialize(self, plans, cfg):
        plans = [replace(p, evidence=replace(p.evidence, reward=_bf16(p.evidence.reward))) for p in plans]
        return super().materialize(plans, cfg)
