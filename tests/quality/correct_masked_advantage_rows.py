"""A CORRECT backend: advantages stored only where a token trains (row_advantages x token_mask, zero at prompt,
tool-output and padding positions) instead of NeMo-RL's unmasked broadcast. The loss multiplies every per-token
term by token_mask[:, 1:] x sample_mask, so the step is bit-identical (OpenRLHF/TRL keep advantages only on action
tokens); `advantages/sum` is logged from the logical advantages as NeMo-RL logs it (unchanged)."""

from __future__ import annotations

from dataclasses import replace

from compactsim.harness.pipeline.backend import ReferenceBackend

SCENARIO = "layout-dp2-microbatch2-mask-sample"  # right padding in two-row micro-batches and a padding row


class Backend(ReferenceBackend):
    name = "correct-masked-advantage-rows"

    def materialize(self, plans, cfg):
        batch = super().materialize(plans, cfg)
        return replace(batch, row_advantages=batch.row_advantages * batch.row_token_mask.to(batch.row_advantages.dtype))
