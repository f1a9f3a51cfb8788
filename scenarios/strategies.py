"""Hypothesis strategies for valid scenarios and adversarial mutations, exported for users' own property tests.

Every strategy is a plain function with keyword-only bounds, checked before anything is built
(a bad bound raises `ConfigError("invalid_argument")` naming ``name=value``). Scenarios are
valid by construction (`@st.composite`, no rejecting filters): every generated rollout runs to
completion against the scripted mock server, so its plan must equal the oracle's. Adversarial
scenarios pair a documented mutation (`compactsim.scenarios.mutations`) with a rollout shape it applies to.

    from hypothesis import given
    from compactsim.scenarios.strategies import scenarios

    @given(scenarios(max_turns=5, max_group_size=3))
    def test_my_trainer_matches_the_oracle(scenario): ...
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

from compactsim.agents.rollout.script import ImageSpec, ToolCallSpec, ToolResult, TurnScript
from compactsim.harness.core.digests import canonical_digest
from compactsim.harness.core.errors import ConfigError
from compactsim.scenarios.model import MAX_GROUP_SIZE, MAX_GROUPS, MAX_TURNS, RewardsSpec, RolloutOverride, Scenario, ScriptSpec
from compactsim.scenarios.mutations import MUTATIONS, MUTATIONS_BY_NAME, Mutation

#: Evidence flavours that carry a contract (mutations edit contract records).
CONTRACT_FLAVOURS: tuple[str, ...] = ("gym-0.7.0-transport", "gym-0.7.0-full", "gym-pr2870", "osworld")
FLAVOURS: tuple[str, ...] = (*CONTRACT_FLAVOURS, "none")
#: Compaction families `compaction_schedules` draws from.
POLICY_FAMILIES: tuple[str, ...] = (
    "identity", "recency-images", "recency-reasoning", "summary", "tool-output-truncation", "think-strip",
)
_TEXT = st.text(alphabet="abcdefghijklmnopqrstuvwxyz .,!?0123456789", min_size=1, max_size=12)
_TOOLS = ("screenshot", "click", "type_text", "scroll")


def _bad(name: str, value: Any, expected: str) -> ConfigError:
    return ConfigError("invalid_argument", f"{name}={value!r}: expected {expected}")


def _check_range(lo_name: str, lo: int, hi_name: str, hi: int, floor: int, ceiling: int) -> None:
    for name, value in ((lo_name, lo), (hi_name, hi)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise _bad(name, value, f"an int in [{floor}, {ceiling}]")
        if not floor <= value <= ceiling:
            raise _bad(name, value, f"an int in [{floor}, {ceiling}]")
    if lo > hi:
        raise ConfigError("invalid_argument", f"{lo_name}={lo} > {hi_name}={hi}: expected {lo_name} <= {hi_name}")


def _check_choices(name: str, values: Sequence[str], allowed: Sequence[str]) -> tuple[str, ...]:
    values = tuple(values)
    if not values:
        raise _bad(name, values, f"a non-empty subset of {list(allowed)}")
    unknown = [v for v in values if v not in allowed]
    if unknown:
        raise _bad(name, values, f"values from {list(allowed)} (unknown: {unknown})")
    return values


# ---------------------------------------------------------------------------------------------- media and turns


def media(*, min_images: int = 0, max_images: int = 2, keys: int = 3) -> st.SearchStrategy[tuple[ImageSpec, ...]]:
    """Tiny synthetic images (8–16 px); keys come from a pool of `keys`, so repeats happen on purpose."""
    _check_range("min_images", min_images, "max_images", max_images, 0, 8)
    if isinstance(keys, bool) or not isinstance(keys, int) or not 1 <= keys <= 64:
        raise _bad("keys", keys, "an int in [1, 64]")
    image = st.builds(
        lambda kind, key, width, height: ImageSpec(kind=kind, key=key, width=width, height=height,
                                                   shape="circle" if kind == "shape" else None),
        kind=st.sampled_from(["screen", "shape"]),
        key=st.integers(0, keys - 1).map(lambda k: f"img-{k}"),
        width=st.sampled_from([8, 12, 16]),
        height=st.sampled_from([8, 12]),
    )
    return st.lists(image, min_size=min_images, max_size=max_images).map(tuple)


@st.composite
def _turn(draw: st.DrawFn, final: bool, max_images: int, image_keys: int) -> TurnScript:
    reasoning = draw(st.one_of(st.none(), _TEXT))
    if final:
        text = draw(_TEXT) if reasoning is None else draw(st.one_of(st.none(), _TEXT))
        return TurnScript(reasoning=reasoning, text=text, finish_reason=draw(st.sampled_from(["stop", "stop", "length"])))
    call = ToolCallSpec(name=draw(st.sampled_from(_TOOLS)), arguments={"x": draw(st.integers(0, 99))})
    images = draw(media(min_images=0, max_images=max_images, keys=image_keys))
    result = ToolResult(output=draw(_TEXT), images=images, caption=draw(_TEXT) if images else None)
    return TurnScript(reasoning=reasoning, text=draw(st.one_of(st.none(), _TEXT)), tool_calls=(call,), tool_results=(result,))


def turns(
    *, min_turns: int = 1, max_turns: int = 6, max_images_per_observation: int = 2, image_keys: int = 4
) -> st.SearchStrategy[ScriptSpec]:
    """Explicit scripts: `n - 1` tool-calling turns (with optional images and text), then a final answer."""
    _check_range("min_turns", min_turns, "max_turns", max_turns, 1, MAX_TURNS)
    _check_range("max_images_per_observation", max_images_per_observation, "max_images_per_observation",
                 max_images_per_observation, 0, 4)
    if isinstance(image_keys, bool) or not isinstance(image_keys, int) or not 1 <= image_keys <= 64:
        raise _bad("image_keys", image_keys, "an int in [1, 64]")

    @st.composite
    def build(draw: st.DrawFn) -> ScriptSpec:
        n = draw(st.integers(min_turns, max_turns))
        body = [draw(_turn(False, max_images_per_observation, image_keys)) for _ in range(n - 1)]
        body.append(draw(_turn(True, 0, image_keys)))
        return ScriptSpec(turns=tuple(body))

    return build()


def compaction_schedules(*, families: Sequence[str] = POLICY_FAMILIES, chunked: bool = True) -> st.SearchStrategy[str]:
    """Compaction preset names (`compactsim.agents.policy_preset` grammar) that honest agents declare correctly."""
    families = _check_choices("families", families, POLICY_FAMILIES)
    if not isinstance(chunked, bool):
        raise _bad("chunked", chunked, "a bool")
    chunk = st.sampled_from(["", "-chunked2", "-chunked3"]) if chunked else st.just("")
    options: list[st.SearchStrategy[str]] = []
    if "identity" in families:
        options.append(st.just("identity"))
    if "recency-images" in families:
        options.append(st.builds(lambda k, c, m: f"recency-images-k{k}{m}{c}", st.integers(1, 3), chunk,
                                 st.sampled_from(["", "-nomarker"])))
    if "recency-reasoning" in families:
        options.append(st.builds(lambda k, f, c: f"recency-reasoning-last{k}{f}{c}", st.integers(1, 2),
                                 st.sampled_from(["", "-first"]), chunk))
    if "summary" in families:
        # keep0 with a summary at turn 2 rewrites only the completion just sampled, which no earlier view held:
        # Gym's descriptor rule still calls the next view append-compatible, the server refuses its required
        # prefix and every rollout fails (as think-strip keep0 does: `every-rollout-failed-empty-batch`), so skip it
        options.append(st.integers(0, 1).flatmap(lambda keep: st.lists(
            st.integers(3 if keep == 0 else 2, 6), min_size=1, max_size=2, unique=True,
        ).map(lambda at: "summary" + "".join(f"-at{t}" for t in sorted(at)) + f"-keep{keep}")))
    if "tool-output-truncation" in families:
        options.append(st.builds(lambda m, k: f"tool-output-truncation-max{m}-keep{k}", st.sampled_from([4, 8, 16]),
                                 st.integers(0, 1)))
    if "think-strip" in families:
        options.append(st.builds(lambda k: f"think-strip-keep{k}", st.integers(1, 2)))  # keep0: see summary
    return st.one_of(*options)


def rewards(*, group_size: int = 2) -> st.SearchStrategy[RewardsSpec]:
    """Reward rules: fixed, a cycling pattern, or by rollout index (0, ½ and 1 so groups differ or tie)."""
    _check_range("group_size", group_size, "group_size", group_size, 1, MAX_GROUP_SIZE)
    value = st.sampled_from([0.0, 0.5, 1.0])
    return st.one_of(
        st.builds(lambda v: RewardsSpec(fixed=v), value),
        st.lists(value, min_size=1, max_size=group_size).map(lambda p: RewardsSpec(pattern=tuple(p))),
        st.dictionaries(st.integers(0, group_size - 1), value, max_size=group_size).map(
            lambda d: RewardsSpec(by_index=d, default=0.0)),
    )


def rollouts(
    *, group_size: int = 2, max_overrides: int = 2, min_turns: int = 1, max_turns: int = 6, families: Sequence[str] = POLICY_FAMILIES
) -> st.SearchStrategy[tuple[RolloutOverride, ...]]:
    """Per-rollout overrides (own script and/or own compaction), so only some rollouts of a group compact."""
    _check_range("group_size", group_size, "group_size", group_size, 1, MAX_GROUP_SIZE)
    _check_range("max_overrides", max_overrides, "max_overrides", max_overrides, 0, MAX_GROUP_SIZE)
    _check_range("min_turns", min_turns, "max_turns", max_turns, 1, MAX_TURNS)
    families = _check_choices("families", families, POLICY_FAMILIES)
    override = st.builds(
        RolloutOverride,
        index=st.integers(0, group_size - 1),
        script=st.one_of(st.none(), turns(min_turns=min_turns, max_turns=max_turns)),
        compaction=st.one_of(st.none(), compaction_schedules(families=families)),
    )
    return st.lists(override, max_size=max_overrides).map(tuple)


def _named(data: dict[str, Any], prefix: str) -> Scenario:
    data = {**data, "name": "x", "purpose": "generated"}
    digest = canonical_digest(data)[:10]
    return Scenario.model_validate({**data, "name": f"{prefix}-{digest}", "purpose": f"generated by compactsim.scenarios.strategies ({digest})"})


def scenarios(
    *,
    min_groups: int = 1,
    max_groups: int = 2,
    min_group_size: int = 1,
    max_group_size: int = 3,
    min_turns: int = 1,
    max_turns: int = 6,
    flavours: Sequence[str] = CONTRACT_FLAVOURS,
    families: Sequence[str] = POLICY_FAMILIES,
    name_prefix: str = "generated",
) -> st.SearchStrategy[Scenario]:
    """Valid scripted scenarios: groups, group sizes, scripts, compaction, overrides, rewards, mask flags, geometry."""
    _check_range("min_groups", min_groups, "max_groups", max_groups, 1, MAX_GROUPS)
    _check_range("min_group_size", min_group_size, "max_group_size", max_group_size, 1, MAX_GROUP_SIZE)
    _check_range("min_turns", min_turns, "max_turns", max_turns, 1, MAX_TURNS)
    flavours = _check_choices("flavours", flavours, FLAVOURS)
    families = _check_choices("families", families, POLICY_FAMILIES)
    if "none" in flavours and len(flavours) == 1 and families != ("identity",):
        raise _bad("families", families, "('identity',) when flavours is ('none',): compaction without a contract fails")
    if not isinstance(name_prefix, str) or not name_prefix or not name_prefix.replace("-", "").isalnum():
        raise _bad("name_prefix", name_prefix, "lowercase letters, digits and dashes")

    @st.composite
    def build(draw: st.DrawFn) -> Scenario:
        groups = draw(st.integers(min_groups, max_groups))
        size = draw(st.integers(min_group_size, max_group_size))
        flavour = draw(st.sampled_from(flavours))
        legacy = flavour == "none"
        fams = ("identity",) if legacy else families
        script = draw(turns(min_turns=min_turns, max_turns=max_turns, max_images_per_observation=2))
        data: dict[str, Any] = {
            "seed": draw(st.integers(0, 2**31)),
            "groups": groups,
            "group_size": size,
            "flavour": flavour,
            "script": script.model_dump(mode="json", exclude_defaults=True),
            "compaction": draw(compaction_schedules(families=fams)),
            "rewards": draw(rewards(group_size=size)).model_dump(mode="json", exclude_none=True),
            "mask_sample": draw(st.lists(st.integers(0, size - 1), max_size=size, unique=True)),
            "routes": draw(st.booleans()),
            "trainer": {"policy": {"dp_size": draw(st.sampled_from([1, 2])),
                                   "train_micro_batch_size": draw(st.sampled_from([1, 2]))}},
        }
        if legacy:  # a legacy result carries no group id: every rollout is its own group of one
            data["group_size"], data["mask_sample"], data["rewards"] = 1, [], {"fixed": 1.0}
        else:
            overrides = draw(rollouts(group_size=size, min_turns=min_turns, max_turns=max_turns, families=fams))
            data["rollouts"] = [o.model_dump(mode="json", exclude_none=True) for o in overrides]
        return _named(data, name_prefix)

    return build()


# ---------------------------------------------------------------------------------------------- adversarial


def mutations(*, names: Sequence[str] | None = None) -> st.SearchStrategy[Mutation]:
    """Documented mutations of `compactsim.scenarios.mutations` (each with the code it must provoke)."""
    chosen = _check_choices("names", names, tuple(MUTATIONS_BY_NAME)) if names is not None else tuple(m.name for m in MUTATIONS)
    return st.sampled_from([MUTATIONS_BY_NAME[n] for n in chosen])


#: Mutations that need a field some contract flavours do not write, and those flavours.
_FLAVOURS_WITHOUT: dict[str, tuple[str, ...]] = {
    "unknown_schema_version": ("gym-pr2870",),  # only the 0.7.0 shapes carry a schema_version to corrupt
    "misstate_image_dimensions": ("osworld",),  # OSWorld's assets declare no original_dimensions
}


def adversarial_scenarios(
    *,
    names: Sequence[str] | None = None,
    max_group_size: int = 3,
    min_turns: int = 4,
    max_turns: int = 6,
    name_prefix: str = "adversarial",
) -> st.SearchStrategy[Scenario]:
    """A valid K=1 image-recency group with one rollout edited by a mutation; `expect` names the mutation's code."""
    mutation_strategy = mutations(names=names)
    _check_range("max_group_size", max_group_size, "max_group_size", max_group_size, 1, MAX_GROUP_SIZE)
    _check_range("min_turns", min_turns, "max_turns", max_turns, 4, MAX_TURNS)

    @st.composite
    def build(draw: st.DrawFn) -> Scenario:
        mutation = draw(mutation_strategy)
        flavours = [f for f in CONTRACT_FLAVOURS if f not in _FLAVOURS_WITHOUT.get(mutation.name, ())]
        size = draw(st.integers(1, max_group_size))
        data: dict[str, Any] = {
            "seed": draw(st.integers(0, 2**31)),
            "group_size": size,
            "flavour": draw(st.sampled_from(flavours)),
            "compaction": draw(st.sampled_from(["recency-images-k1", "recency-images-k1-nomarker"])),
            "script": {"generate": {"turns": draw(st.integers(min_turns, max_turns)),
                                    "images_per_observation": draw(st.integers(1, 2)),
                                    "reasoning": draw(st.booleans())}},
            "mutation": {"name": mutation.name, "index": draw(st.integers(0, size - 1))},
            "expect": {"verdict": "error", "code": mutation.code},
        }
        return _named(data, name_prefix)

    return build()


__all__ = [
    "CONTRACT_FLAVOURS",
    "FLAVOURS",
    "POLICY_FAMILIES",
    "adversarial_scenarios",
    "compaction_schedules",
    "media",
    "mutations",
    "rewards",
    "rollouts",
    "scenarios",
    "turns",
]
