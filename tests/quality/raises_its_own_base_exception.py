"""Broken backend: `plan` raises a `BaseException` subclass of its own (as some job schedulers' cancel signals are).

Not an `Exception`, yet still the backend's failure: a `backend.error` finding, not a traceback that
ends the suite. Only Ctrl-C (`KeyboardInterrupt`) stops a run.
"""

from __future__ import annotations

from typing import Any

from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "backend.error"
SCENARIO = "no-compaction"


class Cancelled(BaseException):
    """A cancellation signal outside the `Exception` hierarchy."""


class Backend(ReferenceBackend):
    name = "raises-its-own-base-exception"

    def plan(self, result: Any) -> Any:
        raise Cancelled("the scheduler cancelled this job")
