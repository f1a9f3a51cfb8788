"""compactsim: a deterministic harness for GRPO training of context-compacted agent rollouts.

Everything installed lives under this one import package, so it coexists with a trainer's own
``harness``, ``agents`` or ``scenarios`` packages:

- `compactsim.harness`: contract, pipeline under test, oracle, audit, runner, CLI, reports
- `compactsim.mock_servers`: deterministic vLLM-compatible model server, reward server
- `compactsim.agents`: scripted agents, compaction policies, Gym evidence emitters
- `compactsim.scenarios`: scenario model, catalogue, strategies, mutations
- ``compactsim/examples``: the reference Gym payloads (data, see `examples_dir`)

In a checkout these are the repository's top-level folders (``harness/``, ``agents/``, ...),
mapped here by the install (``setup.py``'s package-dir); importing them under their bare folder
names is refused, so no module is ever loaded twice.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

#: The sub-packages, each a top-level folder of the repository.
SUBPACKAGES: tuple[str, ...] = ("harness", "mock_servers", "agents", "scenarios")

__all__ = ["SUBPACKAGES", "examples_dir"]


def examples_dir() -> Path:
    """The reference payloads: ``compactsim/examples`` when installed, ``examples/`` in a checkout.

    Both sit beside the folder holding `compactsim.harness`, so one rule finds either.
    """
    spec = importlib.util.find_spec("compactsim.harness")
    if spec is None or spec.origin is None:  # pragma: no cover - a broken install
        raise ModuleNotFoundError("compactsim.harness is not installed")
    return Path(spec.origin).resolve().parent.parent / "examples"
