"""The JSON Schemas shipped with compactsim (golden files and dumps), loaded by name from package data.

Names and the file each describes:

- ``rows-dump``: one line of the rows dump an external trainer writes (`compactsim verify`).
- ``metrics-dump``: one line of the optional metrics dump (`compactsim verify --metrics`).
- ``manifest``: a golden directory's ``manifest.json``.
- ``expectation``: ``scenarios/NAME/expectation.json``.
- ``expected-rows``: one line of ``scenarios/NAME/rows/step-NNNN.jsonl``.
- ``payload``: one line of ``scenarios/NAME/payloads/step-NNNN/group-G.jsonl``.
- ``scenario``: ``scenarios/NAME/scenario.json``.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator

from compactsim.harness.core.errors import ConfigError

SCHEMA_NAMES: tuple[str, ...] = (
    "rows-dump",
    "metrics-dump",
    "manifest",
    "expectation",
    "expected-rows",
    "payload",
    "scenario",
)


def schema_text(name: str) -> str:
    """The schema file's exact text (what `compactsim schema NAME` prints)."""
    if name not in SCHEMA_NAMES:
        raise ConfigError("invalid_argument", f"unknown schema {name!r}; expected one of {', '.join(SCHEMA_NAMES)}")
    return (resources.files("compactsim.harness.golden.schemas") / f"{name}.schema.json").read_text(encoding="utf-8")


@cache
def load_schema(name: str) -> dict[str, Any]:
    """The parsed schema called `name` (one of `SCHEMA_NAMES`)."""
    return json.loads(schema_text(name))  # type: ignore[no-any-return]


@cache
def validator(name: str) -> Draft202012Validator:
    """A Draft 2020-12 validator for the schema called `name` (the schema itself is checked first)."""
    schema = load_schema(name)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


__all__ = ["SCHEMA_NAMES", "load_schema", "schema_text", "validator"]
