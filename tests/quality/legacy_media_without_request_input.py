"""Broken backend: without a contract, images are binned from `response.output` only; the task image in
the request input (`responses_create_params.input`, the first prompt) is dropped.

Legacy media binning walks the items of `responses_create_params.input` (when present), then
`response.output` (golden-spec §4); NeMo-RL's seed images come from the request or result `input`
(nemo-rl-semantics §1.7). The rows then hold fewer image tokens' worth of media than their prompts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from unittest.mock import patch

from compactsim.harness.core.trace_plan import TracePlan
from compactsim.harness.pipeline import ingest
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "verdict.unexpected_error"
SCENARIO = "legacy-task-image"


class Backend(ReferenceBackend):
    """The reference planner with legacy media binning that never reads the request input."""

    name = "legacy-media-without-request-input"

    def plan(self, result: Mapping[str, Any]) -> TracePlan:
        original = ingest._bin_legacy_media

        def output_only(calls: Any, envelope: Any, raw: Any, rollout_id: str) -> Any:
            return original(calls, None, raw, rollout_id)  # the request input is not walked

        with patch.object(ingest, "_bin_legacy_media", output_only):
            return super().plan(result)
