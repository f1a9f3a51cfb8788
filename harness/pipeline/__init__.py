"""harness/pipeline: the system under test (planner, materializer, loss, trainer) behind the `Backend` seam.

`Backend` and `ReferenceBackend` are re-exported lazily, so importing a light submodule (the
planner, the loss) does not load the trainer.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Backend", "ReferenceBackend"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from compactsim.harness.pipeline import backend

        return getattr(backend, name)
    raise AttributeError(f"module 'compactsim.harness.pipeline' has no attribute {name!r}")
