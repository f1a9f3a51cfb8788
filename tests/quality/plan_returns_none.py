"""Broken backend: `plan` returns None for every result (a forgotten `return`).

The finding blames `plan` ("plan returned NoneType, not a TracePlan"); before the runner checked what each Backend
method returns, the first stage to trip over the None was named instead (materialize's AttributeError).
"""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "backend.error"
SCENARIO = "no-compaction"


class Backend(ReferenceBackend):
    name = "plan-returns-none"

    def plan(self, result):
        super().plan(result)  # the plan is built, then dropped
