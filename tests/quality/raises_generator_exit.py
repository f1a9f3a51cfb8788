"""Broken backend: `materialize` lets a `GeneratorExit` escape (a generator-based loader re-raising its own close).

The runner's frame is no generator, so nothing closed it: the exception is the backend's failure, a
`backend.error` finding naming the raising frame, not a traceback that ends the suite.
"""

from __future__ import annotations

from collections.abc import Sequence

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.core.trace_plan import TracePlan
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig

EXPECTED_CHECK = "backend.error"
SCENARIO = "no-compaction"


class Backend(ReferenceBackend):
    name = "raises-generator-exit"

    def materialize(self, plans: Sequence[TracePlan], cfg: TrainerConfig) -> TraceBatch:
        raise GeneratorExit("the row loader was closed mid-batch")
