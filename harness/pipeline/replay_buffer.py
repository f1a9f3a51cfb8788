"""Async GRPO's replay buffer: prompt groups tagged with the version that generated them and the step they are for.

Semantics follow NeMo-RL's async GRPO (`shared/reference/nemo-rl-semantics.md` §6): an item is a
whole prompt group (all its rollouts share one generation version and one baseline); the
collector fills targets ``v .. v + max_trajectory_age_steps`` gap-first; the trainer at version
``v`` evicts groups generated before ``v − max_trajectory_age_steps``, then takes exactly
``num_prompts_per_step`` groups whose target is ``v``, first in first out. Different groups of
one batch may therefore come from different versions; the loss's importance-sampling
correction (``exp(prev − gen)``) is what makes that sound, which is why config validation
requires it for async GRPO.

The buffer is an immutable value: `add` and `sample` return a new buffer, so the collection
schedule and the sampled batches are pure functions of what was added, never of timing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from compactsim.harness.core.errors import ConfigError


@dataclass(frozen=True, slots=True, eq=False)
class BufferedGroup:
    """One prompt group's Gym `/run` results, generated at `generation_version` for step `target_version`."""

    group_key: str
    results: tuple[Mapping[str, Any], ...]
    generation_version: int
    target_version: int

    def age(self, trained_version: int) -> int:
        """Optimizer steps between the weights that generated the group and those that train on it."""
        return trained_version - self.generation_version

    def to_json(self) -> dict[str, Any]:
        return {
            "group_key": self.group_key,
            "num_rollouts": len(self.results),
            "generation_version": self.generation_version,
            "target_version": self.target_version,
        }


@dataclass(frozen=True, slots=True, eq=False)
class ReplaySample:
    """The groups one trainer step takes, and the groups evicted as too old on the way."""

    trained_version: int
    groups: tuple[BufferedGroup, ...]
    evicted: tuple[BufferedGroup, ...] = ()

    @property
    def results(self) -> list[Mapping[str, Any]]:
        """Every rollout result of the sampled groups, group by group."""
        return [r for g in self.groups for r in g.results]

    @property
    def ages(self) -> tuple[int, ...]:
        return tuple(g.age(self.trained_version) for g in self.groups)

    @property
    def generation_versions(self) -> tuple[int, ...]:
        return tuple(sorted({g.generation_version for g in self.groups}))

    def to_json(self) -> dict[str, Any]:
        """What an artifact records: versions of every sampled and evicted group."""
        return {
            "trained_version": self.trained_version,
            "groups": [g.to_json() for g in self.groups],
            "evicted": [g.to_json() for g in self.evicted],
        }


@dataclass(frozen=True, slots=True, eq=False)
class ReplayBuffer:
    """Groups waiting to be trained on, in arrival order."""

    groups: tuple[BufferedGroup, ...] = ()

    def __len__(self) -> int:
        return len(self.groups)

    def add(self, *groups: BufferedGroup) -> ReplayBuffer:
        """A buffer with `groups` appended; a group key may be buffered once, for a target not before its generation."""
        keys = {g.group_key for g in self.groups}
        for g in groups:
            if g.group_key in keys:
                raise ConfigError("invalid_argument", f"group {g.group_key!r} is already in the replay buffer")
            if g.target_version < g.generation_version:
                raise ConfigError(
                    "invalid_argument",
                    f"group {g.group_key!r}: target_version={g.target_version} precedes its "
                    f"generation_version={g.generation_version}; a group can only train on the same or later weights",
                )
            if not g.results:
                raise ConfigError("invalid_argument", f"group {g.group_key!r} has no rollout results")
            keys.add(g.group_key)
        return ReplayBuffer(self.groups + tuple(groups))

    def count(self, target_version: int) -> int:
        """Groups buffered for step `target_version`."""
        return sum(1 for g in self.groups if g.target_version == target_version)

    def collection_targets(
        self, current_version: int, *, max_age_steps: int, groups_per_step: int, budget: int
    ) -> tuple[int, ...]:
        """Targets of the next `budget` (at most) groups to generate with the weights of `current_version`.

        Gap-first, like NeMo's collector: targets ``current .. current + max_age_steps`` in order,
        each topped up to `groups_per_step` groups. A group generated now is at most
        `max_age_steps` old when it trains, so it is never evicted.
        """
        _check_positive(groups_per_step=groups_per_step)
        if max_age_steps < 0 or budget < 0:
            raise ConfigError("invalid_argument", f"max_age_steps={max_age_steps}, budget={budget}: expected >= 0")
        out: list[int] = []
        for target in range(current_version, current_version + max_age_steps + 1):
            need = max(groups_per_step - self.count(target), 0)
            take = min(need, budget - len(out))
            out.extend([target] * take)
        return tuple(out)

    def sample(
        self, num_groups: int, current_version: int, max_age_steps: int
    ) -> tuple[ReplaySample | None, ReplayBuffer]:
        """Evict groups older than `max_age_steps`, then take `num_groups` groups targeted at `current_version`.

        Returns ``(None, buffer)`` (the trainer must wait) when fewer than `num_groups` such
        groups are buffered; evicted groups are gone from the returned buffer either way.
        """
        _check_positive(num_groups=num_groups)
        if max_age_steps < 0:
            raise ConfigError("invalid_argument", f"max_age_steps={max_age_steps}: expected >= 0")
        oldest = max(0, current_version - max_age_steps)
        kept = tuple(g for g in self.groups if g.generation_version >= oldest)
        evicted = tuple(g for g in self.groups if g.generation_version < oldest)
        ready = [g for g in kept if g.target_version == current_version]
        if len(ready) < num_groups:
            return None, ReplayBuffer(kept)
        taken = tuple(ready[:num_groups])
        taken_ids = {id(g) for g in taken}
        rest = tuple(g for g in kept if id(g) not in taken_ids)
        return ReplaySample(current_version, taken, evicted), ReplayBuffer(rest)


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if value < 1:
            raise ConfigError("invalid_argument", f"{name}={value}: expected >= 1")


__all__ = ["BufferedGroup", "ReplayBuffer", "ReplaySample"]
