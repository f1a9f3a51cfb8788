"""Turn a `Scenario` into what runs it: rollout specs per step, model/reward server settings, step batches.

Pure functions of the scenario (and, for `step_results`, of the collected rollouts): no server
is started here. A runner does, for every step `k`::

    specs = step_specs(scenario, k)                      # in slot order: group-major, then index
    collected = collect(specs, servers)                  # compactsim.agents.collect, servers from the settings below
    results = step_results(scenario, k, collected, generation_version=v)  # what the trainer receives
    plans = [plan_rollout(r) for r in results]; ...      # the system under test

`model_server_settings` scripts every step at once, so one server serves a whole run (policy
mode: the runner pushes new weights between steps). Rollouts that failed (the agent gave up)
never reach the trainer; the mutation and the batch corruption are applied last.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from compactsim.agents.rollout.script import RolloutSpec, SamplingConfig
from compactsim.harness.core.contract import TRAINER_POLICY_VERSION, with_trainer_policy_version
from compactsim.harness.core.errors import ConfigError
from compactsim.harness.core.seeds import derive_int
from compactsim.harness.core.tree_copy import copy_tree
from compactsim.scenarios.model import Scenario, resolve_compaction
from compactsim.scenarios.mutations import MUTATIONS_BY_NAME, MutationNotApplicable

if TYPE_CHECKING:
    from compactsim.harness.core.policy import PolicyConfig as ModelConfig
    from compactsim.harness.pipeline.train_config import TrainerConfig

_CONTRACT_KEYS = ("context_compaction_contract", "rollout_trace_contract")
_RECORD_KEYS = ("model_call_metadata", "completion_evidence")


def rollout_id(step: int, group: int, index: int) -> str:
    """``s{step}-g{group}-r{index}``: unique across a whole run."""
    return f"s{step}-g{group}-r{index}"


def group_id(step: int, group: int) -> str:
    """``s{step}-g{group}``: one GRPO group (one prompt) of one step."""
    return f"s{step}-g{group}"


def task_id(task: int) -> str:
    """``task-{task}``: the id of task number `task` (`Scenario.task_of`), the same at every step."""
    return f"task-{task}"


@dataclass(frozen=True, slots=True)
class RolloutSlot:
    """Where a rollout sits in a scenario run."""

    step: int
    group: int
    index: int

    @property
    def rollout_id(self) -> str:
        return rollout_id(self.step, self.group, self.index)

    @property
    def group_id(self) -> str:
        return group_id(self.step, self.group)


def _check_step(scenario: Scenario, step: int) -> None:
    if not 0 <= step < scenario.steps:
        raise ConfigError("invalid_argument", f"step={step} is outside scenario {scenario.name!r} (steps={scenario.steps})")


def slots(scenario: Scenario, step: int) -> tuple[RolloutSlot, ...]:
    """The step's rollouts in spec order: group-major, then rollout index."""
    _check_step(scenario, step)
    return tuple(RolloutSlot(step, g, i) for g in range(scenario.groups) for i in range(scenario.group_size))


def slot_of(scenario: Scenario, rid: str) -> RolloutSlot:
    """The slot of a rollout id of this scenario (`ConfigError` for a foreign id)."""
    for step in range(scenario.steps):
        for s in slots(scenario, step):
            if s.rollout_id == rid:
                return s
    raise ConfigError("invalid_argument", f"rollout id {rid!r} is not part of scenario {scenario.name!r}")


def rollout_seed(scenario: Scenario, slot: RolloutSlot) -> int:
    """The spec seed of one rollout (drives its synthetic pixels), a pure function of the scenario seed."""
    return derive_int(scenario.seed, "scenario.rollout", step=slot.step, group=slot.group, index=slot.index)


def rollout_spec(scenario: Scenario, slot: RolloutSlot) -> RolloutSpec:
    """The agents' spec of one rollout, overrides applied."""
    g, i, t = slot.group, slot.index, scenario.task_of(slot.group)
    script_spec = scenario.setting("script", g, i, step=slot.step)
    script = script_spec.build(derive_int(scenario.seed, "scenario.script", group=t))  # groups of one task: one script
    if scenario.groups > 1:
        script = script.model_copy(update={"task": f"{script.task} [task {t}]"})
    max_output_tokens = scenario.setting("max_output_tokens", g, i, step=slot.step)
    return RolloutSpec(
        rollout_id=slot.rollout_id,
        group_id=slot.group_id,
        task_id=task_id(t),
        rollout_index=i,
        attempt_index=0,
        seed=rollout_seed(scenario, slot),
        task_seed=derive_int(scenario.seed, "scenario.task_images", group=t),  # one task, one first prompt: pixels too
        script=script,
        context_history=resolve_compaction(scenario.setting("compaction", g, i, step=slot.step)),
        flavour=scenario.setting("flavour", g, i, step=slot.step),
        max_steps=scenario.setting("max_steps", g, i, step=slot.step),
        send_required_prefix=scenario.setting("send_required_prefix", g, i, step=slot.step),
        sampling=SamplingConfig(max_output_tokens=max_output_tokens),
        endpoint=scenario.endpoint,
    )


def step_specs(scenario: Scenario, step: int) -> tuple[RolloutSpec, ...]:
    """Every rollout spec of one step, in slot order."""
    return tuple(rollout_spec(scenario, s) for s in slots(scenario, step))


def fault_specs(scenario: Scenario) -> list[dict[str, Any]]:
    """The scenario's faults as the model server's `FaultSpec` JSON (selectors expanded to rollout ids)."""
    out: list[dict[str, Any]] = []
    for f in scenario.faults:
        base: dict[str, Any] = {"kind": f.kind, "endpoint": f.endpoint, "probability": f.probability}
        if f.turn is not None:
            base["turn"] = f.turn
        if f.delay_s is not None:
            base["delay_s"] = f.delay_s
        if f.attempts is not None:
            base["attempts"] = list(f.attempts)
        if f.step is None and f.group is None and f.index is None:
            out.append(base)
            continue
        for step in range(scenario.steps):
            if f.step is not None and f.step != step:
                continue
            for s in slots(scenario, step):
                if (f.group is None or f.group == s.group) and (f.index is None or f.index == s.index):
                    out.append({**base, "rollout_id": s.rollout_id})
    return out


def model_server_settings(scenario: Scenario) -> dict[str, Any]:
    """`ServerSettings` JSON for the mock model server: every step's script, mode, drift, faults."""
    script: dict[str, list[dict[str, Any]]] = {}
    for step in range(scenario.steps):
        for spec in step_specs(scenario, step):
            script[spec.rollout_id] = spec.script.server_steps()
    settings: dict[str, Any] = {
        "mode": scenario.mode,
        "seed": scenario.seed,
        "drift": scenario.drift,
        "script": script,
        "faults": fault_specs(scenario),
        "return_routed_experts": scenario.routes,
    }
    if scenario.routes_format != "lists":
        settings["routed_experts_format"] = scenario.routes_format
    if not scenario.moe.is_default():  # the server's defaults are the default shape: older settings stay byte-identical
        settings |= {"num_layers": scenario.moe.layers, "num_experts": scenario.moe.experts, "top_k": scenario.moe.top_k}
    if scenario.mode == "policy":
        precision = scenario.trainer_config().policy.precision
        settings["policy"] = {"dtype": "float64" if precision == "float64" else "float32"}
    return settings


def reward_server_settings(scenario: Scenario) -> dict[str, Any]:
    """`RewardSettings` JSON for the mock reward server.

    `mask_sample` goes by rollout index (every group, every step); once a rollout override sets its own
    `mask_sample`, by rollout id instead: every step's rollouts `Scenario.masks_sample` flags.
    """
    settings: dict[str, Any] = {"rule": scenario.rewards.rule_json()}
    if any(o.mask_sample is not None for o in scenario.rollouts):
        settings["mask_sample_rollout_ids"] = sorted(
            s.rollout_id for step in range(scenario.steps) for s in slots(scenario, step)
            if scenario.masks_sample(s.group, s.index, step=step))
    else:
        settings["mask_sample_indices"] = sorted(set(scenario.mask_sample))
    return settings


# ---------------------------------------------------------------------------------------------- the step batch


def _rollout_id_of(item: Any) -> str:
    rid = getattr(item, "rollout_id", None)
    if rid is None and isinstance(item, Mapping):
        rid = item.get("rollout_id")
    if not isinstance(rid, str):
        raise TypeError(f"collected rollouts need a rollout_id; got {type(item).__name__}")
    return rid


def _result_of(item: Any) -> dict[str, Any] | None:
    if isinstance(item, Mapping):
        return item.get("result")  # type: ignore[return-value]
    return getattr(item, "result", None)


def step_results(
    scenario: Scenario, step: int, collected: Sequence[Any], *, generation_version: int | Mapping[str, int] | None
) -> list[dict[str, Any]]:
    """The Gym results the trainer receives at `step`, from the step's collected rollouts.

    `collected` holds `compactsim.agents.CollectedRollout`s (or mappings with ``rollout_id`` and ``result``)
    in any order; the results come in slot order (group-major), or in the scenario's `arrival_order`.
    Failed rollouts (result None) are left out. Each result is labelled with
    ``trainer_policy_version`` = `generation_version`: the policy version the trainer had synced to the
    generation server when these rollouts were collected (its own bookkeeping; Gym's items carry no
    version), one for the step or one per rollout id (`fresh_groups`). None leaves the results
    unlabelled. Then the scenario's mutation and batch corruption
    aimed at this step are applied. Results are deep copies; input is untouched.
    Raises `EditNotApplicable` (a `ConfigError("invalid_config")`) when the edit's target lacks what it edits or did
    not complete.
    """
    _check_step(scenario, step)
    by_id: dict[str, dict[str, Any] | None] = {_rollout_id_of(c): _result_of(c) for c in collected}
    order = [s.rollout_id for s in slots(scenario, step)]
    if scenario.arrival_order:  # delivered as rollouts finish, not group by group
        order = [order[k] for k in scenario.arrival_order]
    unknown = sorted(set(by_id) - set(order))
    if unknown:
        raise ConfigError("invalid_argument", f"rollouts {unknown[:3]} are not part of step {step} of {scenario.name!r}")
    results: list[tuple[str, dict[str, Any]]] = [(rid, copy_tree(by_id[rid])) for rid in order  # type: ignore[misc]
                                                 if by_id.get(rid) is not None]
    if generation_version is not None:
        for rid, result in results:
            version = generation_version if isinstance(generation_version, int) else generation_version[rid]
            with_trainer_policy_version(result, version)

    def target(kind: str, ref: Any) -> int:
        rid = rollout_id(step, ref.group, ref.index)
        for k, (r, _) in enumerate(results):
            if r == rid:
                return k
        raise EditNotApplicable(f"{kind} target {rid!r} of scenario {scenario.name!r} did not complete (a fault or "
                                f"the scenario's drift failed it during collection): there is no result to edit")

    m = scenario.mutation
    if m is not None and m.step == step:
        k = target("mutation", m)
        try:
            results[k] = (results[k][0], MUTATIONS_BY_NAME[m.name].apply(results[k][1]))
        except MutationNotApplicable as exc:
            raise _not_applicable(scenario, f"mutation {m.name!r}", results[k][0], step, exc) from None
    c = scenario.corruption
    if c is not None and c.step == step:
        k = target("corruption", c)
        try:
            _corrupt(results, k, c.kind)
        except MutationNotApplicable as exc:
            raise _not_applicable(scenario, f"corruption {c.kind!r}", results[k][0], step, exc) from None
    return [r for _, r in results]


class EditNotApplicable(ConfigError):
    """A scenario's mutation or corruption cannot be made on the rollout it targets, found once that rollout exists
    (e.g. `remove_media_asset` on a rollout whose script shows no image): the scenario is bad input, not a finding."""

    def __init__(self, detail: str) -> None:
        super().__init__("invalid_config", detail)

    def __reduce__(self):  # type: ignore[override]
        return (EditNotApplicable, (self.detail,))


def _not_applicable(scenario: Scenario, what: str, rollout: str, step: int,
                    exc: MutationNotApplicable) -> EditNotApplicable:
    """The scenario's edit cannot be made on the rollout it targets: a config error naming both, not a crash."""
    return EditNotApplicable(f"scenario {scenario.name!r}: {what} does not apply to {rollout!r} at step {step}: {exc}")


def _corrupt(results: list[tuple[str, dict[str, Any]]], k: int, kind: str) -> None:
    """Apply batch corruption `kind` to the result at `k` of `results` (in place)."""
    rid, result = results[k]
    if kind == "duplicate_rollout":
        results.insert(k + 1, (rid, copy_tree(result)))
    elif kind == "drop_rollout":
        del results[k]
    elif kind == "zero_call_capture":
        results[k] = (rid, zero_call_capture(result))
    elif kind == "bump_policy_version":
        results[k] = (rid, bump_policy_version(result))
    elif kind == "narrow_routes":
        results[k] = (rid, narrow_routes(result))
    elif kind == "resubmit_under_new_id":
        results.insert(k + 1, (rid, resubmitted(result)))
    elif kind == "drop_reward":
        results[k] = (rid, without_reward(result))


def _response(result: dict[str, Any]) -> dict[str, Any]:
    return result["response"] if "response" in result and "output" not in result else result


def _is_token_item(item: Any) -> bool:
    return isinstance(item, Mapping) and any(item.get(k) is not None for k in ("prompt_token_ids", "generation_token_ids"))


def zero_call_capture(result: dict[str, Any]) -> dict[str, Any]:
    """The same rollout as Gym reports it when the agent made no model call: no token item, no record."""
    out = copy_tree(result)
    resp = _response(out)
    resp["output"] = [it for it in resp.get("output", []) if not _is_token_item(it)]
    for key in _RECORD_KEYS:
        if key in resp:
            resp[key] = []
    for key in ("boundary_events", "chunk_records", "lineage_deltas"):
        if key in resp:
            resp[key] = []
    if "media_assets" in resp:
        resp["media_assets"] = {}
    return out


def narrow_routes(result: dict[str, Any]) -> dict[str, Any]:
    """Every call's routed experts lose their last top-k column: a model server with a smaller top-k.

    Each call's routes stay a valid [tokens, layers, top-k - 1] array, so only the rule across rows
    (one route layout per batch) is broken. Needs routes recorded as lists with top-k of at least 2.
    """
    out = copy_tree(result)
    touched = False
    for item in _response(out).get("output", []):
        routes = item.get("routed_experts") if _is_token_item(item) else None
        if routes is None:
            continue
        if not isinstance(routes, list) or not all(isinstance(row, list) and all(isinstance(layer, list) and len(layer) >= 2
                                                                                 for layer in row) for row in routes):
            raise MutationNotApplicable("narrow_routes: routed_experts must be [tokens][layers][top-k >= 2] lists")
        item["routed_experts"] = [[layer[:-1] for layer in row] for row in routes]
        touched = True
    if not touched:
        raise MutationNotApplicable("narrow_routes: the result records no routed experts")
    return out


def without_reward(result: dict[str, Any]) -> dict[str, Any]:
    """The `/run` result without its `reward` key (a consumer must refuse it, not default the reward to 0)."""
    if "reward" not in result:
        raise MutationNotApplicable("drop_reward: the result carries no reward to drop")
    out = copy_tree(result)
    del out["reward"]
    return out


#: what `resubmitted` appends to the rollout id of the copy it makes
RESUBMITTED_SUFFIX = "-resubmitted"


def resubmitted(result: dict[str, Any]) -> dict[str, Any]:
    """The same result under a new logical rollout id: its contract's and call records' `rollout_id` end in
    `RESUBMITTED_SUFFIX` (a rollout retried by the agent and reported twice, as far as the trainer can tell)."""
    out = copy_tree(result)
    resp = _response(out)
    contract = resp.get("context_compaction_contract") or resp.get("rollout_trace_contract")
    if not isinstance(contract, dict) or not isinstance(contract.get("rollout_id"), str):
        raise MutationNotApplicable("resubmit_under_new_id: the result has no contract rollout_id to rename")
    old = contract["rollout_id"]
    contract["rollout_id"] = old + RESUBMITTED_SUFFIX
    for key in _RECORD_KEYS:
        for rec in resp.get(key) or []:
            if isinstance(rec, dict) and rec.get("rollout_id") == old:
                rec["rollout_id"] = old + RESUBMITTED_SUFFIX
    return out


def bump_policy_version(result: dict[str, Any]) -> dict[str, Any]:
    """Every call of the rollout claims one policy version later.

    The trainer's ``trainer_policy_version`` label goes up by one (Gym's items carry no version; a
    result without a label gets 1, one later than the implicit 0), and so does any item- or
    record-level ``policy_version`` a non-Gym producer wrote, which would override the label.
    """
    out = copy_tree(result)
    resp = _response(out)
    labelled = resp is not out  # a bare response (no `/run` envelope) has nowhere to hold the label
    if labelled:
        out[TRAINER_POLICY_VERSION] = int(out.get(TRAINER_POLICY_VERSION) or 0) + 1
    touched = False
    for item in resp.get("output", []):
        if _is_token_item(item):
            if not labelled or "policy_version" in item:
                item["policy_version"] = int(item.get("policy_version") or 0) + 1
            touched = True
    for key in _RECORD_KEYS:
        for rec in resp.get(key) or []:
            if isinstance(rec, dict) and "policy_version" in rec:
                rec["policy_version"] = int(rec.get("policy_version") or 0) + 1
    if not touched:
        raise MutationNotApplicable("bump_policy_version: the result has no token-bearing output item")
    return out


# ---------------------------------------------------------------------------------------------- everything at once


@dataclass(frozen=True, slots=True)
class ScenarioBuild:
    """Everything a runner needs to run a scenario (besides the servers and the backend)."""

    scenario: Scenario
    #: Rollout specs of every step, in slot order.
    specs: tuple[tuple[RolloutSpec, ...], ...]
    model_settings: dict[str, Any]
    reward_settings: dict[str, Any]
    trainer_config: TrainerConfig
    #: The policy's shape (router layers, experts, top-k from `Scenario.moe`) for the trainer's weights.
    model_config: ModelConfig


def build_scenario(scenario: Scenario) -> ScenarioBuild:
    """Specs for every step, both servers' settings and the validated trainer config."""
    return ScenarioBuild(
        scenario=scenario,
        specs=tuple(step_specs(scenario, k) for k in range(scenario.steps)),
        model_settings=model_server_settings(scenario),
        reward_settings=reward_server_settings(scenario),
        trainer_config=scenario.trainer_config(),
        model_config=model_config(scenario),
    )


def model_config(scenario: Scenario) -> ModelConfig:
    """The tiny policy's shape for `scenario`: its `moe` router shape, every other dimension the default."""
    from compactsim.harness.core.policy import PolicyConfig as ModelConfig  # torch: only once a run builds the scenario

    moe = scenario.moe
    return ModelConfig(n_layers=moe.layers, n_experts=moe.experts, top_k=moe.top_k).check()


__all__ = [
    "RESUBMITTED_SUFFIX",
    "RolloutSlot",
    "ScenarioBuild",
    "build_scenario",
    "bump_policy_version",
    "fault_specs",
    "group_id",
    "model_config",
    "model_server_settings",
    "narrow_routes",
    "resubmitted",
    "reward_server_settings",
    "rollout_id",
    "rollout_seed",
    "rollout_spec",
    "slot_of",
    "slots",
    "step_results",
    "step_specs",
    "task_id",
    "without_reward",
    "zero_call_capture",
]
