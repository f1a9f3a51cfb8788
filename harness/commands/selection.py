"""Scenario selectors on the command line: catalogue names, tags and YAML files, checked before anything runs.

A selector that looks like a file (ends in .yaml/.yml or contains a path separator) must be a
readable scenario file within the input limits (`compactsim.harness.core.json_input`), so a missing path
says "file not found" instead of "no scenario or tag". An unknown name or tag gets "did you
mean" suggestions from `difflib` (edit distance, so a typo such as ``no-compacton`` finds
``no-compaction``), not only substring matches.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from compactsim.harness.core.errors import ConfigError
from compactsim.harness.core.json_input import InputError


def looks_like_file(selector: str) -> bool:
    """Whether a selector names a file rather than a catalogue scenario or tag."""
    return selector.endswith((".yaml", ".yml")) or "/" in selector or os.sep in selector


def suggestions(word: str, choices: Iterable[str], *, limit: int = 5) -> list[str]:
    """Close matches: names containing the word (shortest first), then difflib's nearest by edit ratio."""
    pool = sorted(set(choices))
    close = sorted((c for c in pool if word in c), key=lambda c: (len(c), c))
    close += [c for c in difflib.get_close_matches(word, pool, n=limit, cutoff=0.6) if c not in close]
    return close[:limit]


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``"; did you mean 'a' or 'b'?"`` (empty when nothing is close)."""
    close = suggestions(word, choices)
    if not close:
        return ""
    quoted = [repr(c) for c in close]
    return "; did you mean " + (quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]) + "?"


def check_scenario_file(selector: str) -> Path:
    """The path of a scenario file selector, read once to check it exists, decodes and stays within the limits."""
    path = Path(selector)
    if not path.exists():
        raise InputError(selector, None, None, "file not found (a scenario YAML file)")
    from compactsim.scenarios.catalogue import ScenarioFileError, check_shape, read_scenario_file

    text, data = read_scenario_file(path)  # `invalid_config`, as `load_file` reports the same file
    if not text.strip():
        raise ScenarioFileError(str(path), None, None, "empty scenario file")
    check_shape(data, source=str(path), text=text)  # its entries: when it is loaded
    return path


def check_names(names: Sequence[str], catalogue: Any, *, tags: bool = True) -> None:
    """Every name must be a catalogue scenario (or tag, when `tags`); otherwise a `ConfigError` with suggestions."""
    known = set(catalogue.names) | (set(catalogue.tags) if tags else set())
    for name in names:
        if name in known:
            continue
        what = "no scenario or tag" if tags else "unknown scenario"
        hint = did_you_mean(name, known) or f"; {len(catalogue.names)} scenarios, see `compactsim list`"
        raise ConfigError("invalid_argument", f"{what} {name!r}{hint}")


def check_selectors(selectors: Sequence[str]) -> None:
    """Check files and names of `selectors` (what `compactsim run/export/shrink/train` accept)."""
    from compactsim.scenarios.catalogue import default_catalogue

    names = []
    for sel in selectors:
        if looks_like_file(sel):
            check_scenario_file(sel)
        else:
            names.append(sel)
    if names:
        check_names(names, default_catalogue())


def select_scenarios(selectors: Sequence[str]) -> tuple[Any, ...]:
    """`compactsim.harness.runner.resolve_scenarios` after `check_selectors`; an empty result is a usage error."""
    from compactsim.harness.runner import resolve_scenarios

    check_selectors(selectors)
    selected = resolve_scenarios(list(selectors))
    if not selected:
        raise ConfigError("invalid_argument", f"no scenario matches {list(selectors)}")
    return selected


__all__ = [
    "check_names",
    "check_scenario_file",
    "check_selectors",
    "did_you_mean",
    "looks_like_file",
    "select_scenarios",
    "suggestions",
]
