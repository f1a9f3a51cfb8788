"""Scenarios: the scenario model, the named catalogue, building specs and batches, metric checks, mutations.

Hypothesis strategies live in `compactsim.scenarios.strategies` (not re-exported: Hypothesis is a test
dependency); `compactsim.scenarios.execute.collect_step` runs a step against in-process mock servers.
"""

if __name__ != "compactsim.scenarios":  # one module object per file: never a second, top-level copy
    raise ImportError("import compactsim.scenarios, not scenarios: compactsim installs one top-level package, `compactsim`")

from compactsim.scenarios.build import (
    RolloutSlot,
    ScenarioBuild,
    build_scenario,
    model_server_settings,
    reward_server_settings,
    rollout_id,
    slots,
    step_results,
    step_specs,
)
from compactsim.scenarios.catalogue import (
    CATALOGUE_DIR,
    Catalogue,
    default_catalogue,
    dump_scenario,
    get_scenario,
    list_scenarios,
    load_catalogue,
    load_file,
)
from compactsim.scenarios.metric_expectations import MetricOutcome, evaluate, parse_metric_expectations
from compactsim.scenarios.model import (
    CORRUPTIONS,
    Corruption,
    Expect,
    FaultRef,
    MutationRef,
    PredicateReward,
    RewardsSpec,
    RolloutOverride,
    Scenario,
    ScriptSpec,
    TurnsGenerator,
)
from compactsim.scenarios.mutations import MUTATIONS, MUTATIONS_BY_NAME, Mutation, MutationNotApplicable

__all__ = [
    "CATALOGUE_DIR",
    "CORRUPTIONS",
    "MUTATIONS",
    "MUTATIONS_BY_NAME",
    "Catalogue",
    "Corruption",
    "Expect",
    "FaultRef",
    "MetricOutcome",
    "Mutation",
    "MutationNotApplicable",
    "MutationRef",
    "PredicateReward",
    "RewardsSpec",
    "RolloutOverride",
    "RolloutSlot",
    "Scenario",
    "ScenarioBuild",
    "ScriptSpec",
    "TurnsGenerator",
    "build_scenario",
    "default_catalogue",
    "dump_scenario",
    "evaluate",
    "get_scenario",
    "list_scenarios",
    "load_catalogue",
    "load_file",
    "model_server_settings",
    "parse_metric_expectations",
    "reward_server_settings",
    "rollout_id",
    "slots",
    "step_results",
    "step_specs",
]
