"""Broken backend: async importance weights computed against the rows' generation version instead of the current one.

NeMo-RL recomputes `prev_logprobs` with the current (pre-update) weights and weights each token by
w = exp(prev - gen) (nemo-rl-semantics §4.4, §6.4: "prev_logprobs is recomputed with the current
weights"). This trainer keeps every version's weights and scores a row's IS numerator with the weights
that generated it, w = exp(lp_{v_gen} - gen): in policy mode that is ~1 everywhere, so the staleness
correction silently vanishes. The PPO ratio still uses the current prev; rows and metrics from the batch
are untouched.
"""

from __future__ import annotations

import copy
from unittest.mock import patch

import torch

from compactsim.harness.pipeline import trainer as T
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.gradient"
SCENARIO = "async-grpo-one-step-stale"


class Backend(ReferenceBackend):
    name = "async-is-weights-against-behaviour-version"

    def __init__(self) -> None:
        self.weights: dict[int, dict[str, torch.Tensor]] = {}

    def train_step(self, state, batch, cfg):
        self.weights[state.version] = {k: v.detach().clone() for k, v in state.policy.state_dict().items()}
        row_images = T._row_images(batch, dtype=state.dtype, device=state.device)
        routes = batch.routed_experts if cfg.policy.router_replay_enabled else None
        mbs = [(rank, rows) for rank in range(batch.dp_size) for rows in batch.microbatch_rows(rank)]
        prev = T._all_logprobs(state.policy, batch, mbs, row_images, routes)
        old = prev.clone()
        versions = batch.row_generation_policy_version
        for v in sorted(set(versions.tolist()) - {-1, state.version}):
            if v not in self.weights:
                continue
            model = copy.deepcopy(state.policy)
            model.load_state_dict(self.weights[v])
            lp = T._all_logprobs(model, batch, mbs, row_images, routes)
            old[versions == v] = lp[versions == v]
        shifted_gen = batch.row_generation_logprobs + (prev - old).to(batch.row_generation_logprobs.dtype)
        original = T._slice

        def sliced(batch_, rows, row_images_, row_routes, device):
            mb = original(batch_, rows, row_images_, row_routes, device)
            gen = shifted_gen[rows.start:rows.stop, : mb.width].to(device)
            return T._Microbatch(**{**{f: getattr(mb, f) for f in mb.__slots__}, "generation_logprobs": gen})

        with patch.object(T, "_slice", sliced):
            return super().train_step(state, batch, cfg)
