"""The named scenario catalogue: YAML files under `scenarios/catalogue/`, loaded, listed and selected.

Each file holds ``scenarios: [ {name, purpose, ...}, ... ]`` (see `compactsim.scenarios.model.Scenario`).
Names are unique across the catalogue; a tag selects every scenario carrying it. A file that
does not parse, or an entry that does not validate, is a `ScenarioFileError` (an `InputError`
with the code "invalid_config"): one line ``FILE:LINE:COLUMN: field $.scenarios[K].FIELD: problem``
naming the offending value (an unknown key: the key; a missing field: the mapping that lacks it),
and the same six keys as every bad input file under ``--json``.
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
from compactsim.harness.core.file_places import Loc, Positions
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


class ScenarioFileError(InputError):
    """A scenario file that does not hold valid scenarios; one line ``FILE:LINE:COLUMN: field F: problem``.

    An `InputError` (so ``--json`` prints ``{error_code, file, line, column, field, message}``) whose
    code stays the catalogue's "invalid_config".
    """

    def __init__(self, source: str, line: int | None, field: str | None, problem: str, *,
                 column: int | None = None) -> None:
        super().__init__(source, line, field, problem, column=column)
        self.code = "invalid_config"
        self.args = (f"{self.code}: {self.detail}",)

    def __reduce__(self):  # type: ignore[override]
        return (_rebuild_scenario_file_error, (self.source, self.line, self.field, self.problem, self.column))


def _rebuild_scenario_file_error(source: str, line: int | None, field: str | None, problem: str,
                                 column: int | None) -> ScenarioFileError:
    return ScenarioFileError(source, line, field, problem, column=column)


class _Positions(Positions):
    """`Positions` that also raise a `ScenarioFileError` at a place."""

    def error(self, source: str, loc: Loc, problem: str, *, key: bool = False,
              missing: bool = False) -> ScenarioFileError:
        line, column, field = self.find(loc, key=key, missing=missing)
        return ScenarioFileError(source, line, field, problem, column=column)


def _one_line(text: str) -> str:
    return "; ".join(part.strip() for part in str(text).splitlines() if part.strip())


def _check_shape(data: Any, source: str, where: _Positions) -> None:
    """``{"scenarios": [...]}`` and nothing else, or a `ScenarioFileError` at the place that differs."""
    shape = "a scenario file is a mapping with one key 'scenarios' holding a list"
    if not isinstance(data, dict):
        raise where.error(source, (), "expected a mapping with one key 'scenarios' holding a list")
    for key in data:
        if key != "scenarios":
            raise where.error(source, (str(key),), f"unknown key {str(key)[:60]!r}: {shape}", key=True)
    if "scenarios" not in data:
        raise where.error(source, ("scenarios",), f"Field required: {shape}", missing=True)
    if not isinstance(data["scenarios"], list):
        got = type(data["scenarios"]).__name__
        raise where.error(source, ("scenarios",), f"expected a list of scenarios, got {got}")


def check_shape(data: Any, *, source: str, text: str | None = None) -> None:
    """The file-level check of `parse_scenarios` alone: `ScenarioFileError` unless `data` is ``{"scenarios": [...]}``.

    `text` (the YAML the data was parsed from) lets the error name the line and column.
    """
    _check_shape(data, source, _Positions(text))


def _other_union_branch(error: Any, errors: list[Any]) -> bool:
    """`error` only says the value is not of one union branch's type (``str`` for a compaction given as a mapping)
    while another branch got further into the value: that deeper problem is the one worth naming."""
    loc = tuple(error["loc"])
    return str(error.get("type", "")).endswith("_type") and any(
        len(other["loc"]) > len(loc) and tuple(other["loc"][: len(loc) - 1]) == loc[:-1] for other in errors)


def _validation_error(exc: ValidationError, source: str, k: int, where: _Positions) -> ScenarioFileError:
    """Pydantic's first problem with entry `k` as one line at its place in the file; the others are counted.

    A wrong type or value is at the value, an unknown key at the key, a missing field at the
    mapping that lacks it, a check across fields at the entry.
    """
    errors = exc.errors()
    first = next((e for e in errors if not _other_union_branch(e, errors)), errors[0])
    kind = first.get("type", "")
    line, column, field = where.find(("scenarios", k, *first["loc"]), key=kind == "extra_forbidden",
                                     missing=kind == "missing")
    problem = _one_line(first["msg"])
    if len(errors) > 1:
        problem += f" (and {len(errors) - 1} more problem(s))"
    return ScenarioFileError(source, line, field, problem, column=column)


def parse_scenarios(data: Any, *, source: str, text: str | None = None) -> tuple[Scenario, ...]:
    """Scenarios from one file's parsed data (``{"scenarios": [...]}``); `source` names it in errors.

    Every problem is a `ScenarioFileError` naming the field; given `text` (the YAML the data was
    parsed from), also the line and column of the offending value.
    """
    where = _Positions(text)
    _check_shape(data, source, where)
    out: list[Scenario] = []
    first: dict[str, int] = {}
    for k, entry in enumerate(data["scenarios"]):
        try:
            out.append(Scenario.model_validate(entry))
        except ValidationError as exc:
            raise _validation_error(exc, source, k, where) from None
        if out[-1].name in first:
            raise where.error(source, ("scenarios", k, "name"), f"the name {out[-1].name!r} is already used by "
                                                                f"scenarios[{first[out[-1].name]}] of this file; "
                                                                "names are unique")
        first[out[-1].name] = k
    return tuple(out)


def read_scenario_file(path: Path) -> tuple[str, Any]:
    """(text, YAML data) of a scenario file, read under the input limits (size, regular file, YAML alias expansion);
    its problems are `ScenarioFileError`s: the catalogue's code (`invalid_config`), at the place they are at."""
    try:
        text = read_text(path, what="scenario file")
        return text, parse_yaml(text, str(path))
    except InputError as exc:
        raise ScenarioFileError(exc.source, exc.line, exc.field, exc.problem, column=exc.column) from None


def load_file(path: Path) -> tuple[Scenario, ...]:
    """The scenarios of one YAML file (`read_scenario_file`)."""
    text, data = read_scenario_file(path)
    return parse_scenarios(data, source=str(path), text=text)


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
    "ScenarioFileError",
    "check_shape",
    "close_names",
    "default_catalogue",
    "dump_scenario",
    "get_scenario",
    "list_scenarios",
    "load_catalogue",
    "load_file",
    "parse_scenarios",
]
