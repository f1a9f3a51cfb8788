"""Broken backend: a padded width that is already a multiple of the divisor gets one more multiple.

`make_sequence_length_divisible_by = m` pads the longest row's length n up to a multiple of m. Written as
`n + m - n % m` (without the final `% m`), it is right unless n already divides by m, where it adds m columns of
padding. The rows' tokens, masks and advantages are unchanged; what moves is every quantity that counts padded
positions, which `advantages/sum` (summed over the padded (R, S) tensor, as NeMo-RL logs it) shows. Only a longest
row that is an exact multiple shows it: `layout-sequence-divisible-by-3`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.core.trace_plan import TracePlan
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig

EXPECTED_CHECK = "metric.exact"
SCENARIO = "layout-sequence-divisible-by-3"


def _widened(batch: TraceBatch, extra: int, pad_token_id: int) -> TraceBatch:
    """`batch` with `extra` more padding columns: pad ids, zero masks and values, placeholder routes `arange(K)`."""

    def pad(t: torch.Tensor, value: float) -> torch.Tensor:
        return torch.cat([t, torch.full((t.shape[0], extra, *t.shape[2:]), value, dtype=t.dtype)], dim=1)

    routes = batch.routed_experts
    if routes is not None:
        rows, _, layers, k = routes.shape
        routes = torch.cat([routes, torch.arange(k, dtype=routes.dtype).expand(rows, extra, layers, k)], dim=1)
    return replace(batch, row_input_ids=pad(batch.row_input_ids, pad_token_id), row_token_mask=pad(batch.row_token_mask, 0),
                   row_generation_logprobs=pad(batch.row_generation_logprobs, 0),
                   row_advantages=pad(batch.row_advantages, 0), routed_experts=routes)


class Backend(ReferenceBackend):
    name = "sequence-length-rounded-past-a-multiple"

    def materialize(self, plans: Sequence[TracePlan], cfg: TrainerConfig) -> TraceBatch:
        batch = super().materialize(plans, cfg)
        m, longest = cfg.policy.make_sequence_length_divisible_by, int(batch.row_input_lengths.max())
        if m > 1 and longest % m == 0:  # the only case where n + m - n % m differs from rounding up
            return _widened(batch, m, cfg.policy.pad_token_id)
        return batch
