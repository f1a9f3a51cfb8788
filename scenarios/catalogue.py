"""The named scenario catalogue: YAML files under `scenarios/catalogue/`, loaded, listed and selected.

Each file holds ``scenarios: [ {name, purpose, ...}, ... ]`` (see `compactsim.scenarios.model.Scenario`).
Names are unique across the catalogue; a tag selects every scenario carrying it. A file that
does not parse, or an entry that does not validate, is a `ConfigError("invalid_config")` naming
the file, the entry and the field path.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from compactsim.harness.core.errors import ConfigError
from compactsim.harness.core.json_input import InputError, parse_yaml, read_text
from compactsim.scenarios.model import Scenario

CATALOGUE_DIR = Path(__file__).resolve().parent / "catalogue"


def close_names(word: str, choices: Iterable[str], *, limit: int = 5) -> list[str]:
    """Names containing `word` (shortest first), then difflib's nearest by similarity ratio (typos)."""
    pool = sorted(set(choices))
    close = sorted((c for c in pool if word in c), key=lambda c: (len(c), c))
    close += [c for c in difflib.get_close_matches(word, pool, n=limit, cutoff=0.6) if c not in close]
    return close[:limit]


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``"; did you mean 'a' or 'b'?"``, or "" when nothing is close."""
    quoted = [repr(c) for c in close_names(word, choices)]
    if not quoted:
        return ""
    return "; did you mean " + (quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]) + "?"


def _where(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<entry>"


def parse_scenarios(data: Any, *, source: str) -> tuple[Scenario, ...]:
    """Scenarios from one file's parsed data (``{"scenarios": [...]}``); `source` names it in errors."""
    if not isinstance(data, dict) or set(data) != {"scenarios"} or not isinstance(data["scenarios"], list):
        raise ConfigError("invalid_config", f"{source}: expected a mapping with one key 'scenarios' holding a list")
    out: list[Scenario] = []
    first: dict[str, int] = {}
    for k, entry in enumerate(data["scenarios"]):
        name = entry.get("name") if isinstance(entry, dict) else None
        label = f"{source}: scenarios[{k}]" + (f" ({name!r})" if name else "")
        try:
            out.append(Scenario.model_validate(entry))
        except ValidationError as exc:
            problems = tuple(f"{_where(e['loc'])}: {e['msg']}" for e in exc.errors())
            raise ConfigError("invalid_config", f"{label}: {len(problems)} invalid field(s)", violations=problems) from None
        if out[-1].name in first:
            raise ConfigError("invalid_config", f"{label}: the name is already used by scenarios[{first[out[-1].name]}] "
                                                "of this file; names are unique")
        first[out[-1].name] = k
    return tuple(out)


def load_file(path: Path) -> tuple[Scenario, ...]:
    """The scenarios of one YAML file, read under the input limits (size, regular file, YAML alias expansion)."""
    try:
        data = parse_yaml(read_text(path, what="scenario file"), str(path))
    except InputError as exc:  # a scenario file's problems keep the catalogue's code; the detail names line and column
        raise ConfigError("invalid_config", exc.detail) from None
    return parse_scenarios(data, source=str(path))


@dataclass(frozen=True)
class Catalogue:
    """Scenarios by name, in file then entry order, with the file each came from."""

    scenarios: tuple[Scenario, ...]
    sources: dict[str, str]

    def __iter__(self) -> Iterator[Scenario]:
        return iter(self.scenarios)

    def __len__(self) -> int:
        return len(self.scenarios)

    def __contains__(self, name: object) -> bool:
        return name in self.sources

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.scenarios)

    @property
    def tags(self) -> tuple[str, ...]:
        return tuple(sorted({t for s in self.scenarios for t in s.tags}))

    def get(self, name: str) -> Scenario:
        """The scenario called `name`; `ConfigError("invalid_argument")` naming close matches otherwise."""
        for s in self.scenarios:
            if s.name == name:
                return s
        hint = _did_you_mean(name, self.names) or f"; {len(self)} scenarios, see `compactsim list`"
        raise ConfigError("invalid_argument", f"unknown scenario {name!r}{hint}")

    def with_tag(self, tag: str) -> tuple[Scenario, ...]:
        return tuple(s for s in self.scenarios if tag in s.tags)

    def select(self, selectors: Sequence[str]) -> tuple[Scenario, ...]:
        """Scenarios named or tagged by `selectors` (all of them when empty), each once, in catalogue order."""
        if not selectors:
            return self.scenarios
        chosen: set[str] = set()
        for sel in selectors:
            if sel in self.sources:
                chosen.add(sel)
            elif sel in self.tags:
                chosen.update(s.name for s in self.with_tag(sel))
            else:
                hint = _did_you_mean(sel, self.names + self.tags) or f"; tags: {', '.join(self.tags[:12])}, ..."
                raise ConfigError("invalid_argument", f"no scenario or tag {sel!r}{hint}")
        return tuple(s for s in self.scenarios if s.name in chosen)


def load_catalogue(directory: Path | None = None) -> Catalogue:
    """Every ``*.yaml`` file of `directory` (default: the bundled catalogue), in file-name order."""
    root = Path(directory) if directory is not None else CATALOGUE_DIR
    files = sorted(root.glob("*.yaml"))
    if not files:
        raise ConfigError("invalid_config", f"{root}: no *.yaml scenario files")
    scenarios: list[Scenario] = []
    sources: dict[str, str] = {}
    for path in files:
        for s in load_file(path):
            if s.name in sources:
                raise ConfigError("invalid_config", f"{path}: scenario name {s.name!r} is already defined in {sources[s.name]}")
            sources[s.name] = str(path)
            scenarios.append(s)
    return Catalogue(tuple(scenarios), sources)


@lru_cache(maxsize=1)
def default_catalogue() -> Catalogue:
    """The bundled catalogue, loaded once per process."""
    return load_catalogue()


def get_scenario(name: str) -> Scenario:
    """A bundled scenario by name."""
    return default_catalogue().get(name)


def list_scenarios() -> tuple[Scenario, ...]:
    """Every bundled scenario."""
    return default_catalogue().scenarios


def dump_scenario(scenario: Scenario) -> str:
    """One scenario as the YAML text of a catalogue file (defaults omitted)."""
    return yaml.safe_dump({"scenarios": [scenario.to_data()]}, sort_keys=False, allow_unicode=True, width=120)


__all__ = [
    "CATALOGUE_DIR",
    "Catalogue",
    "close_names",
    "default_catalogue",
    "dump_scenario",
    "get_scenario",
    "list_scenarios",
    "load_catalogue",
    "load_file",
    "parse_scenarios",
]
