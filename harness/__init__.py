"""compactsim's harness: contract, pipeline under test, oracle, audit, runner.

The most used names are re-exported here and resolved lazily, so `import compactsim.harness` stays cheap
(no torch until a name that needs it is touched)::

    from compactsim.harness import plan_rollout, ContractError, run_scenario
"""

from __future__ import annotations

if __name__ != "compactsim.harness":  # one module object per file: never a second, top-level copy
    raise ImportError("import compactsim.harness, not harness: compactsim installs one top-level package, `compactsim`")

import importlib
from typing import Any

#: public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "Backend": "compactsim.harness.pipeline.backend",
    "CompactsimError": "compactsim.harness.core.errors",
    "ConfigError": "compactsim.harness.core.errors",
    "ContractError": "compactsim.harness.core.errors",
    "PhysicalTrace": "compactsim.harness.core.trace_plan",
    "ReferenceBackend": "compactsim.harness.pipeline.backend",
    "RolloutEvidence": "compactsim.harness.core.evidence",
    "RunOptions": "compactsim.harness.runner",
    "ScenarioExpectation": "compactsim.harness.core.expectations",
    "TraceBatch": "compactsim.harness.core.batch",
    "TracePlan": "compactsim.harness.core.trace_plan",
    "TrainerConfig": "compactsim.harness.pipeline.train_config",
    "audit_run": "compactsim.harness.audit",
    "expect_scenario": "compactsim.harness.oracle",
    "export_goldens": "compactsim.harness.golden",
    "materialize": "compactsim.harness.pipeline.materializer",
    "normalize_result": "compactsim.harness.pipeline.ingest",
    "plan_rollout": "compactsim.harness.pipeline.planner",
    "read_golden": "compactsim.harness.golden",
    "run_scenario": "compactsim.harness.runner",
    "run_suite": "compactsim.harness.runner",
    "verify_dump": "compactsim.harness.golden",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
