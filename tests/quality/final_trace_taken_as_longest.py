"""Broken backend: a rollout's final physical trace is taken to be its longest row.

"Compaction only drops old content and the context grows again", so a route filler that picks each rollout's final
trace by length stamps the -1 boundary sentinel on the last token of every other trace. Right wherever the last trace
is the longest, which every trained catalogue rollout's was; in `final-trace-shorter-than-first` a summary keeping no
turn shrinks the context for good, so the first trace keeps its placeholder route and the final one gets a sentinel.
"""

from __future__ import annotations

from dataclasses import replace
from unittest.mock import patch

from compactsim.harness.pipeline import materializer as materializer_module
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "row.sentinel"
SCENARIO = "final-trace-shorter-than-first"

_checked_rows = materializer_module._checked_rows


def _final_by_length(ordered):
    rows = _checked_rows(ordered)
    longest: dict[int, int] = {}
    for k, row in enumerate(rows):
        if row.parent not in longest or row.length >= rows[longest[row.parent]].length:
            longest[row.parent] = k
    return [replace(row, is_final_trace=longest[row.parent] == k) for k, row in enumerate(rows)]


class Backend(ReferenceBackend):
    name = "final-trace-taken-as-longest"

    def materialize(self, plans, cfg):
        with patch.object(materializer_module, "_checked_rows", _final_by_length):
            return super().materialize(plans, cfg)
