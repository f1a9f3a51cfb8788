"""compactsim's harness: contract, pipeline under test, oracle, audit, runner.

The most used names are re-exported here and resolved lazily, so `import harness` stays cheap
(no torch until a name that needs it is touched)::

    from harness import plan_rollout, ContractError, run_scenario
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "Backend": "harness.pipeline.backend",
    "CompactsimError": "harness.core.errors",
    "ConfigError": "harness.core.errors",
    "ContractError": "harness.core.errors",
    "PhysicalTrace": "harness.core.trace_plan",
    "ReferenceBackend": "harness.pipeline.backend",
    "RolloutEvidence": "harness.core.evidence",
    "RunOptions": "harness.runner",
    "ScenarioExpectation": "harness.core.expectations",
    "TraceBatch": "harness.core.batch",
    "TracePlan": "harness.core.trace_plan",
    "TrainerConfig": "harness.pipeline.train_config",
    "audit_run": "harness.audit",
    "expect_scenario": "harness.oracle",
    "export_goldens": "harness.golden",
    "materialize": "harness.pipeline.materializer",
    "normalize_result": "harness.pipeline.ingest",
    "plan_rollout": "harness.pipeline.planner",
    "read_golden": "harness.golden",
    "run_scenario": "harness.runner",
    "run_suite": "harness.runner",
    "verify_dump": "harness.golden",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'harness' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
