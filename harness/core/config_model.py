"""A pydantic base for configuration read from files: a boolean is never taken for a number.

Pydantic's lax mode turns `true` into 1 for an `int` field and 1.0 for a `float` one, so `seed: true`
or `steps: yes` (YAML) would configure a run without a word. Strict mode refuses that but also
refuses a list for a tuple field, which YAML and JSON only ever give; this mixin refuses just the
boolean, at the field, for every field whose type admits a number and not a boolean.
"""

from __future__ import annotations

import types
import typing
from collections import abc
from typing import Any

from pydantic import BaseModel, Strict, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

_NUMBERS = (int, float)


def _types(annotation: Any) -> set[Any]:
    """Every type an annotation admits at its top level (unions and `Annotated` unwrapped; a `Literal`'s values)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _types(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return set().union(*(_types(a) for a in typing.get_args(annotation)))
    if origin is typing.Literal:
        return {type(v) for v in typing.get_args(annotation)}
    return {annotation}


def _items(annotation: Any) -> Any | None:
    """The item annotation of a `list[X]`, `tuple[X, ...]`, `Sequence[X]` or `set[X]` field, or the value
    annotation of a `dict[K, X]` / `Mapping[K, X]` one (None for anything else)."""
    for candidate in _types(annotation):
        origin, args = typing.get_origin(candidate), typing.get_args(candidate)
        if origin in (list, tuple, abc.Sequence) and (len(args) == 1 or (len(args) == 2 and args[1] is Ellipsis)):
            return args[0]
        if origin in (set, frozenset, abc.Set) and len(args) == 1:
            return args[0]
        if origin in (dict, abc.Mapping) and len(args) == 2:
            return args[1]
    return None


def _keys(annotation: Any) -> Any | None:
    """The key annotation of a `dict[K, X]` / `Mapping[K, X]` field (None for anything else)."""
    for candidate in _types(annotation):
        if typing.get_origin(candidate) in (dict, abc.Mapping) and len(typing.get_args(candidate)) == 2:
            return typing.get_args(candidate)[0]
    return None


def _numeric_not_boolean(annotation: Any) -> bool:
    admitted = _types(annotation)
    return bool(admitted & set(_NUMBERS)) and bool not in admitted and Any not in admitted


def _boolean(what: str) -> PydanticCustomError:
    """The error at the field: its own type, not pydantic's generic ``value_error``, which callers may set aside as
    a rule across fields (`Scenario._trainer_fields` does)."""
    return PydanticCustomError("boolean_number", "{what}: a boolean where a number is expected", {"what": what})


class NoBooleanNumbers(BaseModel):
    """Mixin: a JSON/YAML boolean given where a field (or a list field's item, a mapping field's key or value) takes a
    number is a validation error at that field, instead of pydantic's silent 1 / 0."""

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if field is None or any(isinstance(m, Strict) for m in field.metadata):
            return value  # pydantic's strict mode refuses a boolean itself
        if isinstance(value, bool) and _numeric_not_boolean(field.annotation):
            raise _boolean(str(value).lower())
        key = _keys(field.annotation)
        if key is not None and isinstance(value, dict) and _numeric_not_boolean(key):
            for k in value:
                if isinstance(k, bool):  # YAML's `true:` key is the index 1 to pydantic
                    raise _boolean(f"key {str(k).lower()}")
        item = _items(field.annotation)
        if item is not None and _numeric_not_boolean(item):
            entries = (value.items() if isinstance(value, dict) else enumerate(value)
                       if isinstance(value, (list, tuple, set, frozenset)) else ())
            for key, v in entries:
                if isinstance(v, bool):
                    raise _boolean(f"item {key!r}: {str(v).lower()}")
        return value


__all__ = ["NoBooleanNumbers"]
