"""A scenario: one named, reproducible situation of compacted GRPO training and its expected outcome.

A `Scenario` says who runs (prompt groups × rollouts, their scripts, compaction, evidence
flavour), how the servers answer (scripted or policy mode, drift, faults, rewards, `mask_sample`
flags), how the trainer is configured, what is done to the evidence afterwards (an adversarial
mutation of one rollout, a batch-level corruption), and what a correct consumer must conclude
(`expect`: success, or an error code and turn) plus declarative metric expectations. It is data
only: `compactsim.scenarios.build` turns it into rollout specs and server settings, the oracle turns it and
the agents' ground-truth logs into exact expectations.

Rollouts are addressed by (step, group, index): rollout ``s{step}-g{group}-r{index}`` of group
``s{step}-g{group}`` of task ``task-{group}`` (``task-{tasks[group]}`` when `tasks` is given: groups
with the same task number share the task id and the first prompt, as when a step draws one task
twice, yet keep their own group ids). Every rollout of a group runs the same script
unless an entry of `rollouts` overrides it, so "only some rollouts of a group compact" is one
override; an override's `steps` limits it to those optimizer steps ("text-only until step 2").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError, field_validator, model_validator

from compactsim.agents.compaction.config import ContextHistoryConfig
from compactsim.agents.compaction.presets import policy_preset
from compactsim.agents.rollout.script import (Flavour, ImageSpec, RolloutScript, TurnScript, check_image_pattern,
                                              scripted_turns)
from compactsim.harness.core.config_model import NoBooleanNumbers
from compactsim.harness.core.contract import FLOAT_EXACT_INT
from compactsim.harness.core.errors import CONTRACT_CODES, ConfigError
from compactsim.harness.core.tokenizer import VOCAB_SIZE
from compactsim.mock_servers.model_server.settings import FaultKind, ScriptStep
from compactsim.scenarios.metric_expectations import parse_metric_expectations
from compactsim.scenarios.mutations import MUTATIONS_BY_NAME

if TYPE_CHECKING:  # the config types are read lazily, so importing a scenario never loads the pipeline
    from compactsim.harness.pipeline.train_config import TrainerConfig

#: Catalogue scenarios stay small so the whole catalogue runs in seconds.
MAX_GROUPS = 8
MAX_GROUP_SIZE = 8
MAX_TURNS = 16
MAX_STEPS = 100
#: Trainer batch geometry caps (`trainer.policy.*`): padding rows grow with dp_size × micro-batch
#: size and every row with the sequence multiple, so larger values allocate gigabytes. The CLI's
#: `--dp-size`, `--micro-batch-size` and `--seq-divisible-by` share them (`harness.commands.common`).
MAX_DP_SIZE = 128
MAX_MICRO_BATCH_SIZE = 32
MAX_SEQ_DIVISIBLE_BY = 1024
#: A model call's max_tokens is an int32 in vLLM's and OpenAI's schemas (the mock server's too): beyond it every call
#: would be refused, a scenario error that must not surface as a finding.
MAX_OUTPUT_TOKENS = 2**31 - 1
#: A scenario reward: finite and within ±2**53, the range the pipeline accepts a reward in
#: (`harness.core.contract.Reward`); a larger one would surface as a planner error, not a load error.
Reward = Annotated[float, Field(allow_inf_nan=False, ge=-FLOAT_EXACT_INT, le=FLOAT_EXACT_INT)]
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]{0,79}$")
TAG_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")


def check_name(name: str) -> str:
    """`name` when it is a valid scenario name, else a ValueError saying the rule."""
    if not NAME_PATTERN.fullmatch(name):
        raise ValueError(f"name {name[:100]!r}: use lowercase letters, digits and dashes (at most 80 characters)")
    return name


Mode = Literal["scripted", "policy"]
Drift = Literal["none", "merge", "strip_think"]
CorruptionKind = Literal["duplicate_rollout", "drop_rollout", "zero_call_capture", "bump_policy_version", "narrow_routes",
                         "resubmit_under_new_id", "drop_reward"]

#: What each batch corruption does to the step's list of results (documented once, here).
CORRUPTIONS: dict[str, str] = {
    "duplicate_rollout": "the target rollout's result is submitted twice (duplicate_logical_rollout_id)",
    "drop_rollout": "the target rollout's result never arrives, so its group is short (incomplete_group)",
    "zero_call_capture": "the target rollout arrives with no model call at all (Gym's zero-call capture: "
    "no_eligible_tokens with a contract, missing_token_evidence without one)",
    "bump_policy_version": "every call of the target rollout claims policy_version + 1, so a sync batch mixes "
    "generation versions (mixed_policy_versions)",
    "narrow_routes": "every call of the target rollout records one routed expert fewer per token and layer (top-k "
    "minus one, each call's own shape still valid), so the batch's route layouts disagree "
    "(inconsistent_routed_expert_shapes)",
    "resubmit_under_new_id": "the target rollout's result is submitted a second time under the rollout id "
    "`<id>-resubmitted` (contract and call records renamed), so its group holds one rollout more than "
    "num_generations_per_prompt (oversized_group)",
    "drop_reward": "the target rollout's `/run` result arrives without its `reward` (malformed_payload: GRPO needs "
    "one reward per logical rollout)",
}


class _Strict(NoBooleanNumbers):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ---------------------------------------------------------------------------------------------- scripts


class TurnsGenerator(_Strict):
    """Arguments of `compactsim.agents.scripted_turns`: `turns - 1` tool calls with screenshots, then an answer."""

    turns: StrictInt = Field(4, ge=1, le=MAX_TURNS)
    images_per_observation: StrictInt = Field(1, ge=0, le=4)
    image_pattern: Literal["screens", "shapes", "repeated", "reordered"] = "screens"
    reasoning: bool = True
    tool_output_chars: StrictInt = Field(24, ge=0, le=400)
    final_finish_reason: Literal["stop", "length"] = "stop"

    @model_validator(mode="after")
    def _reordered_needs_two(self) -> TurnsGenerator:
        check_image_pattern(self.image_pattern, self.images_per_observation)
        return self


def _check_scripted_logprobs(k: int, turn: TurnScript) -> None:
    """A turn's `logprobs` must fit the tokens the mock server samples for it (one each, all <= 0).

    The server checks this too (`ScriptStep`), but only when a run starts it; checked here, a bad
    scenario file is refused when it loads, naming the turn, instead of failing as a run finding.
    """
    if turn.logprobs is None:
        return
    try:
        ScriptStep.model_validate(turn.server_step())
    except ValidationError as exc:
        reason = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors(include_url=False))
        raise ValueError(f"turns[{k}].logprobs: {reason}") from None


class ScriptSpec(_Strict):
    """One rollout's script: generated turns (`generate`) or explicit `turns`, never both."""

    task: str = Field("Open the settings app.", min_length=1)
    task_images: tuple[ImageSpec, ...] = ()
    system: str | None = None
    generate: TurnsGenerator | None = None
    turns: tuple[TurnScript, ...] = Field((), max_length=MAX_TURNS)

    @model_validator(mode="after")
    def _one_source(self) -> ScriptSpec:
        if (self.generate is None) == (not self.turns):
            raise ValueError("give exactly one of 'generate' (scripted_turns arguments) or 'turns' (explicit turns)")
        if self.turns:
            for k, turn in enumerate(self.turns[:-1]):
                if not turn.tool_calls:
                    raise ValueError(
                        f"turns[{k}] has no tool call, so the agent would stop there; only the last turn may "
                        "answer without a tool call"
                    )
            for k, turn in enumerate(self.turns):
                _check_scripted_logprobs(k, turn)
        return self

    @property
    def num_turns(self) -> int:
        return self.generate.turns if self.generate is not None else len(self.turns)

    def build(self, seed: int) -> RolloutScript:
        """The agents' `RolloutScript` (generated turns draw their tool arguments from `seed`)."""
        if self.generate is not None:
            g = self.generate
            turns = scripted_turns(
                seed, turns=g.turns, images_per_observation=g.images_per_observation, image_pattern=g.image_pattern,
                reasoning=g.reasoning, tool_output_chars=g.tool_output_chars, final_finish_reason=g.final_finish_reason,
            )
        else:
            turns = self.turns
        return RolloutScript(task=self.task, task_images=self.task_images, system=self.system, turns=turns)


CompactionRef = str | ContextHistoryConfig


def resolve_compaction(ref: CompactionRef) -> ContextHistoryConfig:
    """A preset name (`compactsim.agents.policy_preset`) or an explicit `ContextHistoryConfig`."""
    return policy_preset(ref) if isinstance(ref, str) else ref


def _check_compaction(ref: CompactionRef | None) -> CompactionRef | None:
    if isinstance(ref, str):
        try:
            policy_preset(ref)
        except ConfigError as exc:
            raise ValueError(exc.detail) from None
    return ref


# ---------------------------------------------------------------------------------------------- rollouts


class RolloutOverride(_Strict):
    """Changes for the rollouts at `index` of one group (`group`) or of every group (`group: null`), at the
    optimizer steps `steps` (every step when null): a step of text-only rollouts among steps with images,
    say, leaves the image parameters without a gradient for that step."""

    index: StrictInt = Field(ge=0, lt=MAX_GROUP_SIZE)
    group: StrictInt | None = Field(None, ge=0, lt=MAX_GROUPS)
    steps: tuple[Annotated[StrictInt, Field(ge=0, lt=MAX_STEPS)], ...] | None = None
    script: ScriptSpec | None = None
    compaction: CompactionRef | None = None
    flavour: Flavour | None = None
    send_required_prefix: bool | None = None
    max_steps: StrictInt | None = Field(None, ge=1)
    max_output_tokens: StrictInt | None = Field(None, ge=1, le=MAX_OUTPUT_TOKENS)
    #: True: the verify answer of these rollouts sets `mask_sample`; False: it does not, even where the
    #: scenario's `mask_sample` lists their index. One group's rollout masked and the same index of the
    #: other groups not is what tells a trainer that keys the flag by rollout index from one keying it by rollout.
    mask_sample: StrictBool | None = None

    @field_validator("compaction")
    @classmethod
    def _compaction(cls, v: CompactionRef | None) -> CompactionRef | None:
        return _check_compaction(v)

    def applies(self, group: int, index: int, step: int) -> bool:
        return (self.index == index and (self.group is None or self.group == group)
                and (self.steps is None or step in self.steps))


# ---------------------------------------------------------------------------------------------- rewards


class PredicateReward(_Strict):
    """Reward by the final assistant text: `reward_true` when it contains `contains` (or equals `equals`)."""

    contains: str | None = None
    equals: str | None = None
    reward_true: Reward = 1.0
    reward_false: Reward = 0.0

    @model_validator(mode="after")
    def _one(self) -> PredicateReward:
        if (self.contains is None) == (self.equals is None):
            raise ValueError("a predicate reward needs exactly one of 'contains' or 'equals'")
        return self


#: The router's shape caps: the scripted routes draw from the experts' ordered top-k permutations (8P8 = 40,320 rows).
MAX_MOE_LAYERS = 8
MAX_MOE_EXPERTS = 8


class MoeShape(_Strict):
    """The tiny MoE policy's router shape: MoE layers, experts per layer and experts routed per token.

    One shape serves the model server (its routed experts are [tokens, layers, top_k]) and the trainer's
    policy, so router replay feeds the trainer routes of its own layout. The default (2, 4, 2) is what
    every scenario without `moe` runs; a scenario with `layers != top_k` or `top_k == 1` tells the axes
    apart and catches a trainer that assumes a layout (a sentinel of `layers` columns, axes swapped).
    """

    layers: StrictInt = Field(2, ge=1, le=MAX_MOE_LAYERS)
    experts: StrictInt = Field(4, ge=1, le=MAX_MOE_EXPERTS)
    top_k: StrictInt = Field(2, ge=1, le=MAX_MOE_EXPERTS)

    @model_validator(mode="after")
    def _top_k_within_experts(self) -> MoeShape:
        if self.top_k > self.experts:
            raise ValueError(f"top_k={self.top_k} exceeds experts={self.experts}: a token cannot route to more experts "
                             "than the layer has")
        return self

    def is_default(self) -> bool:
        return self == MoeShape()


class RewardsSpec(_Strict):
    """Exactly one rule: `fixed`, `pattern` (by rollout index, cycling), `by_index` (+ `default`), `predicate`."""

    fixed: Reward | None = None
    pattern: tuple[Reward, ...] | None = Field(None, min_length=1)
    by_index: dict[int, Reward] | None = None
    default: Reward = 0.0
    predicate: PredicateReward | None = None

    @model_validator(mode="after")
    def _one_rule(self) -> RewardsSpec:
        given = [k for k in ("fixed", "pattern", "by_index", "predicate") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one reward rule of fixed, pattern, by_index, predicate; got {given or 'none'}")
        return self

    @property
    def kind(self) -> str:
        return next(k for k in ("fixed", "pattern", "by_index", "predicate") if getattr(self, k) is not None)

    def rule_json(self) -> dict[str, Any]:
        """The reward server's `RewardRule` JSON."""
        if self.fixed is not None:
            return {"kind": "fixed", "value": self.fixed}
        if self.pattern is not None:
            return {"kind": "pattern", "pattern": list(self.pattern)}
        if self.by_index is not None:
            return {"kind": "by_index", "rewards": {str(k): v for k, v in self.by_index.items()}, "default": self.default}
        p = self.predicate
        assert p is not None
        rule: dict[str, Any] = {"kind": "predicate", "reward_true": p.reward_true, "reward_false": p.reward_false}
        rule.update({"contains": p.contains} if p.contains is not None else {"equals": p.equals})
        return rule


# ---------------------------------------------------------------------------------------------- faults, corruption


class FaultRef(_Strict):
    """A mock-server fault switch aimed at scenario rollouts (None selectors match every rollout/turn)."""

    kind: FaultKind
    step: StrictInt | None = Field(None, ge=0)
    group: StrictInt | None = Field(None, ge=0)
    index: StrictInt | None = Field(None, ge=0)
    turn: StrictInt | None = Field(None, ge=1)
    #: 1-based attempts of a call the fault fires on (None: every attempt)
    attempts: tuple[Annotated[StrictInt, Field(ge=1)], ...] | None = Field(None, min_length=1)
    endpoint: Literal["any", "chat", "responses"] = "any"
    probability: float = Field(1.0, ge=0.0, le=1.0)
    delay_s: float | None = Field(None, ge=0.0, le=60.0)


class MutationRef(_Strict):
    """Apply the named `compactsim.scenarios.mutations` mutation to one rollout's Gym result."""

    name: str
    step: StrictInt = Field(0, ge=0)
    group: StrictInt = Field(0, ge=0)
    index: StrictInt = Field(0, ge=0)

    @field_validator("name")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in MUTATIONS_BY_NAME:
            raise ValueError(f"unknown mutation {v!r}; known: {sorted(MUTATIONS_BY_NAME)}")
        return v


class Corruption(_Strict):
    """A batch-level corruption of one step's results (see `CORRUPTIONS`)."""

    kind: CorruptionKind
    step: StrictInt = Field(0, ge=0)
    group: StrictInt = Field(0, ge=0)
    index: StrictInt = Field(0, ge=0)


class Expect(_Strict):
    """The verdict a correct consumer reaches: success, or the contract error `code` (at `turn`, when given)."""

    verdict: Literal["success", "error"] = "success"
    code: str | None = None
    turn: StrictInt | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _consistent(self) -> Expect:
        if self.verdict == "success" and (self.code is not None or self.turn is not None):
            raise ValueError("verdict 'success' takes no code or turn")
        if self.verdict == "error":
            if self.code is None:
                raise ValueError("verdict 'error' needs a contract error code")
            if self.code not in CONTRACT_CODES:
                raise ValueError(f"unknown contract error code {self.code!r}; known: {sorted(CONTRACT_CODES)}")
        return self


# ---------------------------------------------------------------------------------------------- scenario


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `over` merged in, nested mappings merged key by key."""
    out = dict(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) else v
    return out


def _as_validated(raw: dict[str, Any], model: BaseModel) -> dict[str, Any]:
    """`raw`'s keys with the values `model` validated them into: "0.001" becomes 0.001, "yes" True.

    The oracle reads the trainer settings as plain data (`trainer_values`), independent of the pipeline's config
    objects, so it must never see the string a file wrote where pydantic accepted a number.
    """
    out: dict[str, Any] = {}
    for key, value in raw.items():
        typed = getattr(model, key)
        if isinstance(value, dict) and isinstance(typed, BaseModel):
            out[key] = _as_validated(value, typed)
        else:
            out[key] = typed.model_dump() if isinstance(typed, BaseModel) else typed
    return out


#: Scenario fields a `compactsim train` recipe carries (`Scenario.training_recipe`), or that describe the scenario
#: without changing what a training run does (its name, checks and verdict; `mode`: train always serves its policy).
#: Any other field away from its default makes a scenario no plain recipe, so `train` refuses it.
_RECIPE_FIELDS = frozenset({"name", "purpose", "tags", "seed", "expect", "metrics", "mode", "groups", "group_size",
                            "script", "compaction", "flavour", "rewards", "steps", "trainer"})


class Scenario(_Strict):
    """One named scenario (see the module docstring)."""

    name: str
    purpose: str = Field(min_length=1, max_length=240)
    tags: tuple[str, ...] = ()
    seed: StrictInt = Field(0, ge=0, lt=2**63)  # strict: `seed: true` or `'1'` is a typo, not seed 1
    #: Prompt groups per step (= grpo.num_prompts_per_step) and rollouts per group (= num_generations_per_prompt).
    groups: StrictInt = Field(1, ge=1, le=MAX_GROUPS)
    group_size: StrictInt = Field(2, ge=1, le=MAX_GROUP_SIZE)
    #: Task number of each group (one per group; default: group g asks task g). Groups given the same
    #: number share the task (task id and first prompt) but keep distinct group ids.
    tasks: tuple[Annotated[StrictInt, Field(ge=0, lt=MAX_GROUPS)], ...] | None = None
    script: ScriptSpec = ScriptSpec(generate=TurnsGenerator())
    compaction: CompactionRef = "identity"
    flavour: Flavour = "gym-0.7.0-transport"
    #: "chat" is the route Gym's model servers take (they down-convert every Responses call to chat
    #: completions); "responses" stands for a responses-native server that is passed through.
    endpoint: Literal["responses", "chat"] = "chat"
    send_required_prefix: bool | None = None
    max_steps: StrictInt | None = Field(None, ge=1)
    max_output_tokens: StrictInt | None = Field(None, ge=1, le=MAX_OUTPUT_TOKENS)
    rollouts: tuple[RolloutOverride, ...] = ()
    mode: Mode = "scripted"
    drift: Drift = "none"
    routes: bool = True
    #: How the model server sends routed experts: nested lists, or NeMo-RL's ``nrlre1`` base64 envelope (its Gym
    #: path's wire form), which the agents pass through to the trainer unchanged.
    routes_format: Literal["lists", "nrlre1"] = "lists"
    #: Router shape of the policy (server and trainer): layers, experts, top-k.
    moe: MoeShape = MoeShape()
    faults: tuple[FaultRef, ...] = ()
    rewards: RewardsSpec = RewardsSpec(pattern=(1.0, 0.0))
    #: Rollout indices (in every group) whose verify answer sets `mask_sample`.
    mask_sample: tuple[StrictInt, ...] = ()
    #: Async GRPO only: groups of every step collected right before that step trains, with the
    #: newest weights, while the other groups were collected `max_trajectory_age_steps` ahead; the
    #: batch then mixes policy versions, as NeMo-RL's replay buffer hands out groups of several ages.
    fresh_groups: tuple[Annotated[StrictInt, Field(ge=0, lt=MAX_GROUPS)], ...] = ()
    #: The order the trainer receives a step's results in, as indices into its rollouts in group-major order
    #: (group 0's rollouts, then group 1's, ...); empty: that order. Groups are keyed by group id, never by
    #: position, so rows and advantages must not depend on it (results arrive as rollouts finish).
    arrival_order: tuple[StrictInt, ...] = ()
    #: `TrainerConfig` overrides (nested), merged over the scenario's defaults (see `trainer_values`).
    trainer: dict[str, Any] = Field(default_factory=dict)
    steps: StrictInt = Field(1, ge=1, le=MAX_STEPS)
    mutation: MutationRef | None = None
    corruption: Corruption | None = None
    expect: Expect = Expect()
    #: Declarative metric checks: ``{metric or fn(metric): {equals|max_abs_dev+reference|min|max|between}}``.
    metrics: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @field_validator("compaction")
    @classmethod
    def _compaction(cls, v: CompactionRef) -> CompactionRef:
        return _check_compaction(v)  # type: ignore[return-value]

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_name(v)

    @field_validator("purpose")
    @classmethod
    def _one_line(cls, v: str) -> str:
        if "\n" in v.strip():
            raise ValueError("purpose must be one line")
        if not v.strip():  # `min_length` counted the spaces; the stripped purpose would fail the next validation
            raise ValueError("purpose must say something (it is blank)")
        return v.strip()

    @field_validator("tags")
    @classmethod
    def _tags(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [t for t in v if not TAG_PATTERN.match(t)]
        if bad:
            raise ValueError(f"tags {bad}: use lowercase letters, digits and dashes")
        if len(set(v)) != len(v):
            raise ValueError(f"tags {list(v)} repeat a tag")
        return v

    @field_validator("trainer")
    @classmethod
    def _trainer_fields(cls, v: dict[str, Any]) -> dict[str, Any]:
        """Each trainer key and value checked where the file writes it: an unknown key, a wrong type or a value out of
        its range is reported at that key (the merged check in `_cross_checks` named only the scenario).

        Only errors that belong to one field are raised here; rules across fields need the scenario's defaults
        merged first and stay in `_cross_checks`. pydantic nests a `ValidationError` raised in a field validator
        under that field, so the location reaches the file's line and column.
        """
        import typing

        from pydantic_core import InitErrorDetails, PydanticCustomError, core_schema

        from compactsim.harness.pipeline.train_config import TrainerConfig

        builtin = set(typing.get_args(core_schema.ErrorType))
        try:
            validated = TrainerConfig.model_validate(v)
        except ValidationError as exc:  # a custom error type (`NoBooleanNumbers`') is re-raised as one, at its field
            local = [InitErrorDetails(type=e["type"] if e["type"] in builtin
                                      else PydanticCustomError(e["type"], e["msg"]),
                                      loc=e["loc"], input=e["input"], ctx=e.get("ctx", {}))
                     for e in exc.errors() if e["type"] not in ("value_error", "assertion_error")]
            if local:
                raise ValidationError.from_exception_data("trainer", local) from None
            return v
        return _as_validated(v, validated)

    @field_validator("metrics")
    @classmethod
    def _metrics(cls, v: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        try:
            parse_metric_expectations(v)
        except ConfigError as exc:
            raise ValueError(exc.detail) from None
        return v

    @model_validator(mode="after")
    def _cross_checks(self) -> Scenario:
        problems: list[str] = []
        for k, o in enumerate(self.rollouts):
            if o.index >= self.group_size:
                problems.append(f"rollouts[{k}].index={o.index} is outside the group (group_size={self.group_size})")
            if o.group is not None and o.group >= self.groups:
                problems.append(f"rollouts[{k}].group={o.group} is outside groups={self.groups}")
            if o.steps is not None:
                outside = sorted({t for t in o.steps if t >= self.steps})
                if outside:
                    problems.append(f"rollouts[{k}].steps names steps {outside} outside steps={self.steps}")
                if len(set(o.steps)) != len(o.steps) or not o.steps:
                    problems.append(f"rollouts[{k}].steps {list(o.steps)} must list each step once (null: every step)")
        if self.tasks is not None and len(self.tasks) != self.groups:
            problems.append(f"tasks {list(self.tasks)} has {len(self.tasks)} task number(s); give one per group "
                            f"(groups={self.groups})")
        bad_fresh = sorted(g for g in self.fresh_groups if g >= self.groups)
        if bad_fresh:
            problems.append(f"fresh_groups {bad_fresh} names groups outside groups={self.groups}")
        if self.rewards.by_index is not None:
            outside = sorted(i for i in self.rewards.by_index if not 0 <= i < self.group_size)
            if outside:
                problems.append(f"rewards.by_index names rollout indices {outside} outside the group "
                                f"(group_size={self.group_size}); its rewards would never be given")
        if self.arrival_order and sorted(self.arrival_order) != list(range(self.groups * self.group_size)):
            problems.append(f"arrival_order {list(self.arrival_order)} is not a permutation of the step's "
                            f"{self.groups * self.group_size} rollouts (indices 0..{self.groups * self.group_size - 1}, "
                            "group-major)")
        bad_mask = [i for i in self.mask_sample if not 0 <= i < self.group_size]
        if bad_mask:
            problems.append(f"mask_sample {bad_mask} names rollout indices outside the group (group_size={self.group_size})")
        for what, listed in (("mask_sample", self.mask_sample), ("fresh_groups", self.fresh_groups)):
            repeated = sorted({i for i in listed if list(listed).count(i) > 1})
            if repeated:  # a list of indices, not of flags: [0, 1, 0] reads as "rollouts 0 and 1"
                problems.append(f"{what} {list(listed)} repeats {repeated}: it lists indices, each once "
                                f"(e.g. [1] for the second), not one flag per rollout")
        for what, ref in (("mutation", self.mutation), ("corruption", self.corruption)):
            if ref is not None:
                problems += self._slot_problems(what, ref.step, ref.group, ref.index)
        for k, f in enumerate(self.faults):
            if f.step is not None and f.step >= self.steps:
                problems.append(f"faults[{k}].step={f.step} is outside steps={self.steps}")
            if f.group is not None and f.group >= self.groups:
                problems.append(f"faults[{k}].group={f.group} is outside groups={self.groups}")
            if f.index is not None and f.index >= self.group_size:
                problems.append(f"faults[{k}].index={f.index} is outside group_size={self.group_size}")
        m, c = self.mutation, self.corruption
        if c is not None and c.kind == "narrow_routes":
            problems += self._narrow_routes_problems()
        if m is not None and c is not None and (m.step, m.group, m.index) == (c.step, c.group, c.index):
            problems.append("mutation and corruption target the same rollout; aim them at different rollouts")
        if m is not None and m.name == "negative_route_id" and (not self.routes or self.routes_format != "lists"):
            problems.append("mutation 'negative_route_id' re-encodes the first call's route lists; this scenario "
                            + ("records none (routes: false)" if not self.routes else
                               f"sends them as an envelope already (routes_format: {self.routes_format})"))
        if m is not None and m.group < self.groups and m.index < self.group_size:
            flavour = self.setting("flavour", m.group, m.index, step=m.step)
            if flavour == "none":
                problems.append(f"mutation {m.name!r} edits contract records; its target rollout has flavour 'none'")
            elif m.name == "unknown_schema_version" and flavour == "gym-pr2870":
                problems.append("mutation 'unknown_schema_version' needs a 0.7.0 contract; the target's flavour is gym-pr2870")
        if self.mode == "policy" and any(t.logprobs is not None for s in self._scripts() for t in s.turns):
            problems.append("policy mode samples its own logprobs: scripted 'logprobs' are not allowed")
        if problems:
            raise ValueError("; ".join(problems))
        try:
            cfg = self.trainer_config()
        except ConfigError as exc:
            raise ValueError(f"trainer: {exc}") from None
        caps = (("dp_size", cfg.policy.dp_size, MAX_DP_SIZE),
                ("train_micro_batch_size", cfg.policy.train_micro_batch_size, MAX_MICRO_BATCH_SIZE),
                ("make_sequence_length_divisible_by", cfg.policy.make_sequence_length_divisible_by, MAX_SEQ_DIVISIBLE_BY))
        if self.fresh_groups and not cfg.grpo.async_grpo.enabled:
            raise ValueError("fresh_groups needs async GRPO (trainer.grpo.async_grpo.enabled): a sync step "
                             "collects all its groups at once")
        over = [f"policy.{name}={value} exceeds {cap} (padding would allocate gigabytes)" for name, value, cap in caps
                if value > cap]
        if cfg.policy.pad_token_id >= VOCAB_SIZE:  # padding ids go through the policy's embedding
            over.append(f"policy.pad_token_id={cfg.policy.pad_token_id} is not a token of the tiny policy's vocabulary "
                        f"(ids 0..{VOCAB_SIZE - 1})")
        if over:
            raise ValueError(f"trainer: {'; '.join(over)}")
        return self

    def _narrow_routes_problems(self) -> list[str]:
        """Why corruption narrow_routes cannot apply to this scenario's results, found at load (not mid-run)."""
        if self.groups * self.group_size < 2:
            return ["corruption narrow_routes needs a second rollout in the batch for the narrowed routes to "
                    "disagree with (groups x group_size >= 2); alone they only mismatch the policy's top-k"]
        if not self.routes:
            return ["corruption narrow_routes drops a routed expert per token, but this scenario records none "
                    "(routes: false)"]
        if self.routes_format != "lists":
            return [f"corruption narrow_routes edits per-token route lists; routes_format: {self.routes_format} "
                    f"sends one encoded envelope per call (use routes_format: lists)"]
        if self.moe.top_k < 2:
            return ["corruption narrow_routes drops one of each token's top-k experts; moe.top_k=1 leaves none"]
        return []

    def _slot_problems(self, what: str, step: int, group: int, index: int) -> list[str]:
        out = []
        if step >= self.steps:
            out.append(f"{what}.step={step} is outside steps={self.steps}")
        if group >= self.groups:
            out.append(f"{what}.group={group} is outside groups={self.groups}")
        if index >= self.group_size:
            out.append(f"{what}.index={index} is outside group_size={self.group_size}")
        return out

    def _scripts(self) -> list[ScriptSpec]:
        return [self.script, *(o.script for o in self.rollouts if o.script is not None)]

    # ------------------------------------------------------------------ resolved views

    def override(self, group: int, index: int, *, step: int) -> RolloutOverride | None:
        """The last override entry that applies to (group, index) at `step`, or None."""
        found = None
        for o in self.rollouts:
            if o.applies(group, index, step):
                found = o
        return found

    def masks_sample(self, group: int, index: int, *, step: int) -> bool:
        """Whether the verify answer of that rollout (collected at `step`) sets `mask_sample`: the override's
        `mask_sample` when the applying override sets one, else whether `mask_sample` lists the index."""
        o = self.override(group, index, step=step)
        if o is not None and o.mask_sample is not None:
            return o.mask_sample
        return index in self.mask_sample

    def task_of(self, group: int) -> int:
        """The task number group `group` asks (`tasks[group]`, else `group`)."""
        return self.tasks[group] if self.tasks is not None else group

    def setting(self, name: str, group: int, index: int, *, step: int) -> Any:
        """A per-rollout setting at `step`: the override's value when it sets one, else the scenario's."""
        o = self.override(group, index, step=step)
        value = getattr(o, name) if o is not None else None
        return value if value is not None else getattr(self, name)

    def trainer_values(self) -> dict[str, Any]:
        """The trainer settings as plain data: scenario defaults, then `trainer` merged over them.

        Defaults: one optimizer step per logical batch of `groups × group_size` rollouts, float64
        numerics (exact comparisons) and router replay on exactly when the server records routes
        (a scenario that turns it on without routes tests the refusal).
        """
        base: dict[str, Any] = {
            "grpo": {
                "num_prompts_per_step": self.groups,
                "num_generations_per_prompt": self.group_size,
                "max_num_steps": max(self.steps, 1),
                "seed": self.seed,
            },
            "policy": {
                "train_global_batch_size": self.groups * self.group_size,
                "precision": "float64",
                "logprob_dtype": "float64",
                "router_replay_enabled": self.routes,
            },
        }
        return deep_merge(base, self.trainer)

    def trainer_config(self) -> TrainerConfig:
        """`TrainerConfig` of this scenario, validated for the physical-trace path (`ConfigError` otherwise)."""
        from compactsim.harness.pipeline.train_config import parse_trainer_config, validate_physical_trace_training_config

        return validate_physical_trace_training_config(parse_trainer_config(self.trainer_values()))

    def with_seed(self, seed: int) -> Scenario:
        """The same scenario under another seed (`compactsim run --seed N`)."""
        return self.model_validate({**self.to_data(), "seed": seed})

    def to_data(self) -> dict[str, Any]:
        """Plain data (defaults omitted) that validates back into an equal scenario; what YAML files hold."""
        return self.model_dump(mode="json", exclude_defaults=True)

    def summary(self) -> dict[str, Any]:
        """What `compactsim scenarios list --json` prints for this scenario."""
        e = self.expect
        return {
            "name": self.name,
            "tags": list(self.tags),
            "purpose": self.purpose,
            "expected": e.verdict if e.verdict == "success" else f"error: {e.code}" + (f" @ turn {e.turn}" if e.turn else ""),
            "steps": self.steps,
            "mode": self.mode,
        }

    def _fields_a_recipe_drops(self) -> list[str]:
        """Every field set away from its default that a recipe would silently drop: `train` writes its own scripts,
        so only the generator's turns and images per observation and the fields `training_recipe` returns carry."""
        dropped = [f"{name}: {getattr(self, name)!r}" for name, field in type(self).model_fields.items()
                   if name not in _RECIPE_FIELDS
                   and getattr(self, name) != field.get_default(call_default_factory=True)]
        g = self.script.generate
        if g is not None:
            plain = ScriptSpec(generate=TurnsGenerator(turns=g.turns, images_per_observation=g.images_per_observation))
            dropped += [f"script.{name}: {getattr(self.script, name)!r}" for name in ScriptSpec.model_fields
                        if name != "generate" and getattr(self.script, name) != getattr(plain, name)]
            dropped += [f"script.generate.{name}: {getattr(g, name)!r}" for name in TurnsGenerator.model_fields
                        if getattr(g, name) != getattr(plain.generate, name)]
        if self.rewards.pattern is not None and self.rewards != RewardsSpec(pattern=self.rewards.pattern):
            dropped.append(f"rewards: {self.rewards!r} (only a pattern carries)")
        return dropped

    def training_recipe(self) -> dict[str, Any]:
        """The run recipe fields of `compactsim.harness.train_run.RunRecipe` for a uniform generated scenario.

        Raises `ConfigError("invalid_argument")` when the scenario cannot be expressed as a recipe
        (explicit turns, per-rollout overrides, non-pattern rewards, mutations, faults, a router shape of its own).
        """
        why = []
        if self.script.generate is None:
            why.append("explicit turns")
        if self.rollouts:
            why.append("per-rollout overrides")
        if self.tasks is not None:
            why.append("explicit tasks")
        if self.fresh_groups:
            why.append("fresh groups")
        if self.rewards.pattern is None:
            why.append(f"{self.rewards.kind} rewards")
        if not isinstance(self.compaction, str):
            why.append("an explicit compaction config")
        if self.mutation or self.corruption or self.faults:
            why.append("adversarial edits or faults")
        if not self.moe.is_default():  # a training run's policy has the default router shape
            why.append("a router shape other than the default")
        why += self._fields_a_recipe_drops()
        if why:
            raise ConfigError("invalid_argument", f"scenario {self.name!r} is not a plain training recipe: {', '.join(why)}")
        g = self.script.generate
        assert g is not None and self.rewards.pattern is not None and isinstance(self.compaction, str)
        return {
            "description": self.purpose,
            "compaction": self.compaction,
            "turns": g.turns,
            "images_per_observation": g.images_per_observation,
            "flavour": self.flavour,
            "num_prompts_per_step": self.groups,
            "num_generations_per_prompt": self.group_size,
            "reward_pattern": list(self.rewards.pattern),
            "steps": self.steps,
            "trainer": dict(self.trainer),
        }


__all__ = [
    "CORRUPTIONS",
    "CompactionRef",
    "Corruption",
    "CorruptionKind",
    "Drift",
    "Expect",
    "FaultRef",
    "MoeShape",
    "MutationRef",
    "PredicateReward",
    "RewardsSpec",
    "RolloutOverride",
    "Scenario",
    "ScriptSpec",
    "TurnsGenerator",
    "check_name",
    "deep_merge",
    "resolve_compaction",
]
