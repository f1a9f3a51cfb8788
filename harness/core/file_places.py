"""Line and column of a place in a structured input file, for errors that name where a bad value sits.

JSON is read as YAML here (a JSON document composes as the same YAML tree, with marks): one finder for
scenario files and server settings alike.
"""

from __future__ import annotations

from typing import Any

import yaml

from compactsim.harness.core.json_input import format_field_path

Loc = tuple[str | int, ...]


class Positions:
    """Where a place of a YAML or JSON file's data is in its text (composed only when an error needs it): the
    line and column an error about a pydantic location names."""

    def __init__(self, text: str | None) -> None:
        self._text = text
        self._root: Any = None
        self._composed = False

    def root(self) -> Any:
        if not self._composed:
            self._composed = True
            if self._text is not None:
                try:  # the text already passed `parse_yaml`/`parse_json` (limits, aliases), so composing it is safe
                    self._root = yaml.compose(self._text, Loader=yaml.SafeLoader)
                except yaml.YAMLError:
                    self._root = None
        return self._root

    def find(self, loc: Loc, *, key: bool = False, missing: bool = False) -> tuple[int | None, int | None, str]:
        """(line, column, field) of `loc`: the value there (its key with `key`; with `missing`, the mapping lacking it).

        Parts of a pydantic location that are no place in the data (the member names of a union,
        ``[key]``) are skipped; the field path names only the places found (plus a missing key).
        Without the text there is no line and column, and the field path is the whole location.
        """
        node, key_node = self.root(), None
        if node is None:
            return None, None, format_field_path(list(loc))
        found: list[str | int] = []
        last_found = True
        for part in loc:
            nxt = None
            if isinstance(node, yaml.MappingNode):
                nxt = next(((k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == str(part)),
                           None)
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
                nxt = (None, node.value[part])
            last_found = nxt is not None
            if nxt is None:
                if part == "[key]" and key_node is not None:  # a mapping key that does not validate
                    node, key_node = key_node, None
                continue
            key_node, node = nxt
            found.append(part)
        if missing and loc and not last_found:
            found.append(loc[-1])
        elif key and last_found and key_node is not None:
            node = key_node
        mark = node.start_mark
        return mark.line + 1, mark.column + 1, format_field_path(found)


__all__ = ["Loc", "Positions"]
