"""Broken backend: the loss mask is re-derived from the chat template — every assistant message of the row, from
after its ``<|turn_start|><|assistant|>`` header through its ``<|turn_end|>`` — instead of from the calls' sampled
spans (an "assistant-only loss" mask, as template-based SFT/RL code builds it).

Without compaction the two agree: every assistant message in a row was sampled by one of the trace's calls. After a
compaction boundary the new trace's first prompt re-renders assistant turns sampled in an earlier trace (summarised,
think-stripped, or with their images dropped); the template mask trains them again in the new row, under behaviour
logprobs of 0 and the rollout's advantage. NeMo-RL trains exactly the sampled tokens (nemo-rl-semantics §5.3:
"Assistant messages that come from prompt history have no logprobs, so they are not trained"; DESIGN §1: "trainable
mask = the sampled tokens of every call in the trace").
"""

from __future__ import annotations

from dataclasses import replace


from compactsim.harness.core import tokenizer as tok
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "row.mask"
SCENARIO = "summary-compaction"


def _assistant_spans(ids: list[int]) -> list[tuple[int, int]]:
    spans, i, n = [], 0, len(ids)
    while i + 1 < n:
        if ids[i] == tok.TURN_START and ids[i + 1] == tok.ROLE_ASSISTANT:
            start = j = i + 2
            while j < n and ids[j] != tok.TURN_END:
                j += 1
            end = min(j + 1, n)  # the turn end is part of the message
            if end > start:
                spans.append((start, end))
            i = end
        else:
            i += 1
    return spans


class Backend(ReferenceBackend):
    name = "assistant-mask-from-template"

    def materialize(self, plans, cfg):
        batch = super().materialize(plans, cfg)
        mask = batch.row_token_mask.clone()
        adv = batch.row_advantages.clone()
        spans_out = []
        for r in range(batch.num_rows):
            parent = int(batch.parent_indices[r])
            if parent < 0:
                spans_out.append(())
                continue
            length = int(batch.row_input_lengths[r])
            spans = _assistant_spans(batch.row_input_ids[r, :length].tolist())
            mask[r] = 0
            for a, b in spans:
                mask[r, a:b] = 1
                adv[r, a:b] = batch.logical[parent].advantage
            spans_out.append(tuple(spans))
        return replace(batch, row_token_mask=mask, row_advantages=adv, row_mask_spans=tuple(spans_out))
