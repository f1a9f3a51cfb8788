"""The JSON Schemas shipped with compactsim (golden files and dumps), loaded by name from package data.

Names and the file each describes:

- ``rows-dump``: one line of the rows dump an external trainer writes (`compactsim verify`).
- ``metrics-dump``: one line of the optional metrics dump (`compactsim verify --metrics`).
- ``manifest``: a golden directory's ``manifest.json``.
- ``expectation``: ``scenarios/NAME/expectation.json``.
- ``expected-rows``: one line of ``scenarios/NAME/rows/step-NNNN.jsonl``.
- ``payload``: one line of ``scenarios/NAME/payloads/step-NNNN/group-G.jsonl``.
- ``scenario``: ``scenarios/NAME/scenario.json``.

`first_error` is how the golden readers validate: a predicate compiled from the schema
(`fast_check`) accepts a valid document at the speed of a few type tests per field (whole
arrays of numbers or strings in one pass), and only a document it refuses goes through the
jsonschema validator, which then names the problem. The predicate is exact for the keywords
it compiles (what jsonschema accepts, it accepts, on JSON data), so a message is the
validator's own whichever way a document arrives; a schema using any other keyword has no
predicate and is always checked by jsonschema alone.
"""

from __future__ import annotations

import json
import numbers
import re
from collections.abc import Callable, Mapping
from functools import cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

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


def error_path(error: ValidationError) -> list[str]:
    """The sort key the readers order a document's errors by (its JSON path, parts as text)."""
    return list(map(str, error.absolute_path))


def first_error(name: str, data: Any) -> ValidationError | None:
    """None when `data` matches the schema called `name`; else its first error in path order.

    Fast check, slow explain: `fast_check` passes a valid document; only one it refuses is run
    through `validator`, whose errors are then exactly those a plain ``iter_errors`` reports.
    """
    check = fast_check(name)
    if check is not None and check(data):
        return None
    errors = sorted(validator(name).iter_errors(data), key=error_path)
    return errors[0] if errors else None


# ------------------------------------------------------------------------- compiled predicates

#: A compiled schema: True when the instance matches it.
Check = Callable[[Any], bool]


class UnsupportedSchema(Exception):
    """The schema uses a keyword (or a form of one) `compile_check` does not compile."""


#: Keywords that assert nothing (jsonschema without a format checker treats ``format`` the same).
_ANNOTATIONS = frozenset({"title", "description", "$comment", "default", "examples", "deprecated", "readOnly",
                          "writeOnly", "format"})


def _is_integer(x: Any) -> bool:
    """Draft 2020-12 ``integer``: an int that is not a bool, or a float with no fractional part."""
    if type(x) is int:
        return True
    return (isinstance(x, int) and not isinstance(x, bool)) or (isinstance(x, float) and x.is_integer())


def _is_number(x: Any) -> bool:
    """Draft 2020-12 ``number``: any number but a bool (the plain types first: an ABC check is slow)."""
    t = type(x)
    return t is int or t is float or (isinstance(x, numbers.Number) and not isinstance(x, bool))


_TYPE_TESTS: dict[str, Check] = {
    "null": lambda x: x is None,
    "boolean": lambda x: isinstance(x, bool),
    "integer": _is_integer,
    "number": _is_number,
    "string": lambda x: isinstance(x, str),
    "array": lambda x: isinstance(x, list),
    "object": lambda x: isinstance(x, dict),
}
#: Per ``type`` of a plain item schema: the exact Python types whose items certainly have that
#: type (a set of them is tested for a whole array at once; anything else is tested item by item).
_PLAIN_TYPES: dict[str, frozenset[type]] = {
    "integer": frozenset({int}),
    "number": frozenset({int, float}),
    "string": frozenset({str}),
    "boolean": frozenset({bool}),
    "null": frozenset({type(None)}),
}


def _all_of(checks: list[Check]) -> Check:
    if not checks:
        return lambda x: True
    if len(checks) == 1:
        return checks[0]

    def check(x: Any) -> bool:
        for c in checks:
            if not c(x):
                return False
        return True
    return check


def _equals(value: Any) -> Check:
    """jsonschema's ``equal(x, value)`` for scalar constants (a bool equals only itself; 1 equals 1.0)."""
    if isinstance(value, str):
        return lambda x: isinstance(x, str) and x == value
    if value is None or isinstance(value, bool):
        return lambda x: x is value
    if isinstance(value, (int, float)):
        return lambda x: isinstance(x, (int, float)) and not isinstance(x, bool) and x == value
    raise UnsupportedSchema(f"enum/const value {value!r}")


class _Compiler:
    """Turns a Draft 2020-12 schema into a `Check`, one closure per subschema (``$ref`` targets shared)."""

    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root
        self.refs: dict[str, Check] = {}

    def ref(self, ref: Any) -> Check:
        if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
            raise UnsupportedSchema(f"$ref {ref!r} (only local JSON pointers are compiled)")
        if ref not in self.refs:
            target: Any = self.root
            for part in ref[2:].split("/") if ref != "#" else ():
                part = part.replace("~1", "/").replace("~0", "~")
                if isinstance(target, Mapping) and part in target:
                    target = target[part]
                elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
                    target = target[int(part)]
                else:
                    raise UnsupportedSchema(f"$ref {ref!r} does not resolve")
            compiled: list[Check] = []
            self.refs[ref] = lambda x: compiled[0](x)  # a recursive schema meets itself through this
            compiled.append(self.compile(target))
            self.refs[ref] = compiled[0]
        return self.refs[ref]

    def compile(self, schema: Any, *, root: bool = False) -> Check:
        if schema is True:
            return lambda x: True
        if schema is False:
            return lambda x: False
        if not isinstance(schema, Mapping):
            raise UnsupportedSchema(f"schema {schema!r}")
        known = {"type", "enum", "const", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength",
                 "maxLength", "pattern", "minItems", "maxItems", "uniqueItems", "items", "properties", "required",
                 "additionalProperties", "$ref", "allOf", "anyOf", "oneOf", "not", "if", "then", "else", "$defs"}
        if root:
            known |= {"$schema", "$id"}
        unknown = set(schema) - known - _ANNOTATIONS
        if unknown:
            raise UnsupportedSchema(f"keywords {sorted(unknown)}")
        checks: list[Check] = []
        if "type" in schema:
            checks.append(self._type(schema["type"]))
        if "enum" in schema:
            options = [_equals(v) for v in schema["enum"]]
            checks.append(lambda x: any(o(x) for o in options))
        if "const" in schema:
            checks.append(_equals(schema["const"]))
        checks += self._numbers(schema)
        checks += self._strings(schema)
        checks += self._arrays(schema)
        checks += self._objects(schema)
        if "$ref" in schema:
            checks.append(self.ref(schema["$ref"]))
        checks += self._combinators(schema)
        return _all_of(checks)

    @staticmethod
    def _type(types: Any) -> Check:
        names = [types] if isinstance(types, str) else list(types)
        if not names or any(n not in _TYPE_TESTS for n in names):
            raise UnsupportedSchema(f"type {types!r}")
        tests = [_TYPE_TESTS[n] for n in names]
        if len(tests) == 1:
            return tests[0]
        return lambda x: any(t(x) for t in tests)

    @staticmethod
    def _numbers(schema: Mapping[str, Any]) -> list[Check]:
        """Bounds, written as jsonschema fails them (``x < minimum`` and so on: a NaN passes every one)."""
        checks: list[Check] = []
        for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if key not in schema:
                continue
            b = schema[key]
            if not _is_number(b):
                raise UnsupportedSchema(f"{key} {b!r}")
            if key == "minimum":
                checks.append(lambda x, b=b: not _is_number(x) or not x < b)
            elif key == "maximum":
                checks.append(lambda x, b=b: not _is_number(x) or not x > b)
            elif key == "exclusiveMinimum":
                checks.append(lambda x, b=b: not _is_number(x) or not x <= b)
            else:
                checks.append(lambda x, b=b: not _is_number(x) or not x >= b)
        return checks

    @staticmethod
    def _strings(schema: Mapping[str, Any]) -> list[Check]:
        checks: list[Check] = []
        if "minLength" in schema:
            n = schema["minLength"]
            checks.append(lambda x: not isinstance(x, str) or len(x) >= n)
        if "maxLength" in schema:
            m = schema["maxLength"]
            checks.append(lambda x: not isinstance(x, str) or len(x) <= m)
        if "pattern" in schema:
            search = re.compile(schema["pattern"]).search  # jsonschema: re.search(pattern, x)
            checks.append(lambda x: not isinstance(x, str) or search(x) is not None)
        return checks

    def _arrays(self, schema: Mapping[str, Any]) -> list[Check]:
        checks: list[Check] = []
        if "minItems" in schema:
            n = schema["minItems"]
            checks.append(lambda x: not isinstance(x, list) or len(x) >= n)
        if "maxItems" in schema:
            m = schema["maxItems"]
            checks.append(lambda x: not isinstance(x, list) or len(x) <= m)
        if schema.get("uniqueItems") is True:
            checks.append(_unique_items)
        elif schema.get("uniqueItems", False) is not False:
            raise UnsupportedSchema(f"uniqueItems {schema['uniqueItems']!r}")
        if "items" in schema:
            checks.append(self._items(schema["items"]))
        return checks

    def _items(self, item_schema: Any) -> Check:
        each = self.compile(item_schema)
        plain = _plain_item(item_schema)
        if plain is None:
            return lambda x: not isinstance(x, list) or all(map(each, x))
        types, low, high = plain

        def items(x: Any) -> bool:
            if not isinstance(x, list):
                return True
            if not x:
                return True
            found = set(map(type, x))
            if found <= types:
                if low is None and high is None:
                    return True
                if found <= {int}:  # ints are totally ordered: the extremes decide
                    return (low is None or min(x) >= low) and (high is None or max(x) <= high)
            return all(map(each, x))
        return items

    def _objects(self, schema: Mapping[str, Any]) -> list[Check]:
        checks: list[Check] = []
        required = schema.get("required", [])
        if not isinstance(required, list) or not all(isinstance(k, str) for k in required):
            raise UnsupportedSchema(f"required {required!r}")
        if required:
            needed = tuple(required)
            checks.append(lambda x: not isinstance(x, dict) or all(k in x for k in needed))
        props = {k: self.compile(v) for k, v in schema.get("properties", {}).items()}
        extra: Any = schema.get("additionalProperties", True)
        extra_check = None if isinstance(extra, bool) else self.compile(extra)
        if props or extra is not True:
            closed = extra is False

            def fields(x: Any) -> bool:
                if not isinstance(x, dict):
                    return True
                for key, value in x.items():
                    check = props.get(key)
                    if check is None:
                        if closed or (extra_check is not None and not extra_check(value)):
                            return False
                    elif not check(value):
                        return False
                return True
            checks.append(fields)
        return checks

    def _combinators(self, schema: Mapping[str, Any]) -> list[Check]:
        checks: list[Check] = []
        for key in ("allOf", "anyOf", "oneOf"):
            if key in schema:
                subs = [self.compile(s) for s in schema[key]]
                if not subs:
                    raise UnsupportedSchema(f"empty {key}")
                if key == "allOf":
                    checks.append(_all_of(subs))
                elif key == "anyOf":
                    checks.append(lambda x, subs=subs: any(s(x) for s in subs))
                else:
                    checks.append(lambda x, subs=subs: sum(1 for s in subs if s(x)) == 1)
        if "not" in schema:
            negated = self.compile(schema["not"])
            checks.append(lambda x: not negated(x))
        if "if" in schema:
            condition = self.compile(schema["if"])
            then = self.compile(schema.get("then", True))
            otherwise = self.compile(schema.get("else", True))
            checks.append(lambda x: then(x) if condition(x) else otherwise(x))
        return checks


def _plain_item(schema: Any) -> tuple[frozenset[type], float | None, float | None] | None:
    """(types, minimum, maximum) of an item schema that is one scalar ``type`` plus bounds, else None."""
    if not isinstance(schema, Mapping) or not isinstance(schema.get("type"), str):
        return None
    if set(schema) - {"type", "minimum", "maximum"} - _ANNOTATIONS:
        return None
    types = _PLAIN_TYPES.get(schema["type"])
    if types is None:
        return None
    return types, schema.get("minimum"), schema.get("maximum")


def _unique_items(x: Any) -> bool:
    if not isinstance(x, list):
        return True
    if set(map(type, x)) <= {str}:
        return len(set(x)) == len(x)
    return Draft202012Validator({"uniqueItems": True}).is_valid(x)  # jsonschema's own notion of equal items


def compile_check(schema: Mapping[str, Any]) -> Check:
    """A predicate equal to ``Draft202012Validator(schema).is_valid`` on JSON data; `UnsupportedSchema` if it cannot."""
    return _Compiler(schema).compile(schema, root=True)


@cache
def fast_check(name: str) -> Check | None:
    """The compiled predicate of the schema called `name`, or None when it uses a keyword that is not compiled."""
    try:
        return compile_check(load_schema(name))
    except UnsupportedSchema:
        return None


__all__ = ["SCHEMA_NAMES", "UnsupportedSchema", "compile_check", "error_path", "fast_check", "first_error",
           "load_schema", "schema_text", "validator"]
