"""Broken backend: a content-addressed media asset is digest-checked only the first time its id is seen.

Recomputing the canonical digest of every image's source part for every rollout is the planner's most expensive
check, and Gym's media ids are content addresses, so the engineer memoised "verified" ids on the backend: once an
id's asset matched its digest, later assets filed under the same id are trusted. Every catalogue rollout whose
asset was forged showed only its own screenshots (ids no other rollout uses); a GRPO group's shared task image is the
one id two rollouts of a step both carry, and a forged copy of it in the second rollout trains instead of being
refused.
"""

from __future__ import annotations

from unittest.mock import patch

from compactsim.harness.pipeline import planner as planner_module
from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "verdict.expected_error"
SCENARIO = "shared-task-image-swapped-pixels"

_content_problem = planner_module._content_problem


class Backend(ReferenceBackend):
    name = "media-digest-verified-once-per-id"

    def __init__(self) -> None:
        self.verified: set[str] = set()

    def plan(self, result):
        def content_problem(asset):
            if asset.media_id in self.verified:  # BUG: the id, not the asset, is what was verified
                return None
            problem = _content_problem(asset)
            if problem is None:
                self.verified.add(asset.media_id)
            return problem

        with patch.object(planner_module, "_content_problem", content_problem):
            return super().plan(result)
