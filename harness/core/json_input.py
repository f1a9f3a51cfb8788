"""Reading JSON, JSON-lines and YAML files a person hands to compactsim, with stated limits.

Every problem with such a file — missing, too large, not UTF-8, not valid JSON/YAML, nested
deeper than `MAX_DEPTH`, an integer longer than `MAX_INT_DIGITS` digits, a number that does not
fit a float — is one typed `InputError` whose message is one line naming the file, the line and
column (or byte offset) and the field (a JSON path such as ``$.response.output[3]``). The CLI
turns it into exit 2 (bad input), never a traceback: Python's own failures here are a
`RecursionError` (deep nesting), a `ValueError` (more than 4,300 digits) or a
`UnicodeDecodeError`, none of which says where the problem is.

The checks run before the standard parsers so that neither recursion nor integer conversion can
fail inside them: a single regular-expression pass skips strings and counts bracket depth and
overlong digit runs; only when it finds a problem is the JSON path of the offending position
worked out (a second, slower pass over the prefix).
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

from compactsim.harness.core.errors import ConfigError

#: Largest input file read, in bytes (override with COMPACTSIM_MAX_INPUT_BYTES).
DEFAULT_MAX_INPUT_BYTES = 256 * 2**20
MAX_BYTES_ENV = "COMPACTSIM_MAX_INPUT_BYTES"
#: Largest value the environment variable may set (1 PiB): far above any real input, and small
#: enough that no size arithmetic or read call can overflow a C integer.
MAX_INPUT_BYTES_CEILING = 2**50
#: Deepest nesting of arrays/objects (Gym payloads need about 10 levels).
MAX_DEPTH = 64
#: Longest integer literal, in digits (int64 and uint64 values fit in 20).
MAX_INT_DIGITS = 20
#: How large a YAML document may become with every alias expanded at each use, measured as nodes
#: plus scalar characters: at most this many, or `YAML_EXPANSION_FACTOR` times the text's length
#: when that is more. A document without aliases weighs about its own length, so only aliases can
#: pass the limit; a "billion laughs" (aliases of aliases) or one long scalar aliased thousands of
#: times expands by orders of magnitude and is refused while it is composed.
YAML_EXPANSION_FLOOR = 1_000_000
YAML_EXPANSION_FACTOR = 16
#: Bytes read per `read` call (a bounded buffer, whatever the cap).
_READ_CHUNK = 16 * 2**20


def max_input_bytes() -> int:
    """The size cap in force (the environment variable lets CI or a test lower or raise it).

    A value that is not a plain decimal integer in [1, MAX_INPUT_BYTES_CEILING] is a
    `ConfigError` (exit 2 in every command that reads a file); `limits_help` never raises.
    """
    raw = os.environ.get(MAX_BYTES_ENV)
    if raw is None:
        return DEFAULT_MAX_INPUT_BYTES
    text = raw.strip()
    # ASCII digits only (int() would also take "1_000" or non-ASCII digits), and few enough of them
    # that int() never meets its 4,300-digit limit
    value = int(text) if re.fullmatch(r"[0-9]{1,20}", text) else 0
    if not 1 <= value <= MAX_INPUT_BYTES_CEILING:
        shown = raw if len(raw) <= 40 else raw[:37] + "..."
        raise ConfigError("invalid_argument", f"{MAX_BYTES_ENV}={shown!r}: expected a positive integer number of "
                                              f"bytes, at most {MAX_INPUT_BYTES_CEILING} (2**50)")
    return value


def _human_bytes(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes"


def limits_help() -> str:
    """The limits as `--help` states them.

    Called while the CLI registers its commands, so it must never raise: a bad environment value
    is shown here (with the default) and refused, exit 2, only by a command that reads a file.
    """
    try:
        files = f"files up to {_human_bytes(max_input_bytes())} (env {MAX_BYTES_ENV})"
    except ConfigError as exc:
        files = (f"files up to {_human_bytes(DEFAULT_MAX_INPUT_BYTES)} by default (env {MAX_BYTES_ENV}; its current "
                 f"value is invalid, so commands that read a file exit 2: {exc.detail})")
    return (f"Input limits: {files}, nesting up to {MAX_DEPTH} levels, integers up to {MAX_INT_DIGITS} digits, "
            "finite numbers only, no key twice in one object; a file that breaks one exits 2 naming the file, line and "
            "field.")


class InputError(ConfigError):
    """A file that cannot be read as the input it should be; the message is one line: file:line:column, field, problem."""

    def __init__(self, source: str, line: int | None, field: str | None, problem: str, *,
                 column: int | None = None) -> None:
        where = source
        if line is not None:
            where += f":{line}"
            if column is not None:
                where += f":{column}"
        text = f"{where}: " + (f"field {field}: " if field else "") + problem
        super().__init__("invalid_argument", text)
        self.source = source
        self.line = line
        self.column = column
        self.field = field
        self.problem = problem

    def __reduce__(self):  # type: ignore[override]
        return (_rebuild_input_error, (type(self), self.source, self.line, self.field, self.problem, self.column))

    def to_json(self) -> dict[str, Any]:
        return {"error_code": self.code, "file": self.source, "line": self.line, "column": self.column,
                "field": self.field, "message": self.problem}


def _rebuild_input_error(cls: type[InputError], source: str, line: int | None, field: str | None, problem: str,
                         column: int | None) -> InputError:
    err = InputError.__new__(cls)
    InputError.__init__(err, source, line, field, problem, column=column)
    return err


# ------------------------------------------------------------------------------------- bytes → text


def read_bytes(path: Path, *, what: str = "file") -> bytes:
    """The file's bytes: missing, unreadable, not a regular file or over the size cap is an `InputError`.

    Only regular files are opened (after following symlinks): a FIFO, socket or device would block
    `open` or `read` forever, or never end. The read is chunked, so the cap bounds memory however
    large it is set.
    """
    path = Path(path)
    cap = max_input_bytes()
    try:
        st = path.stat()
        if stat.S_ISDIR(st.st_mode):
            raise InputError(str(path), None, None, f"is a directory, expected a {what}")
        if not stat.S_ISREG(st.st_mode):
            raise InputError(str(path), None, None, f"is a {_file_kind(st.st_mode)}, not a regular file "
                                                    f"(expected a {what}); it is not read")
        if st.st_size > cap:
            raise InputError(str(path), None, None, f"{what} is {st.st_size} bytes; the limit is {_human_bytes(cap)} "
                                                    f"(env {MAX_BYTES_ENV})")
        chunks: list[bytes] = []
        total = 0
        # O_NONBLOCK: if the path was swapped for a FIFO after the stat, open still returns at once
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise InputError(str(path), None, None, f"is not a regular file (expected a {what}); it is not read")
            while total <= cap:
                chunk = fh.read(min(_READ_CHUNK, cap + 1 - total))
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
        data = b"".join(chunks)
    except FileNotFoundError:
        raise InputError(str(path), None, None, f"file not found (expected a {what})") from None
    except OSError as exc:
        raise InputError(str(path), None, None, f"cannot read: {exc.strerror or exc}") from None
    if len(data) > cap:  # grew while being read
        raise InputError(str(path), None, None, f"{what} exceeds the limit of {_human_bytes(cap)} (env {MAX_BYTES_ENV})")
    return data


def _file_kind(mode: int) -> str:
    """A person's word for a non-regular file type."""
    for test, name in ((stat.S_ISFIFO, "named pipe (FIFO)"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device")):
        if test(mode):
            return name
    return "special file"


def decode_text(data: bytes, source: str) -> str:
    """UTF-8 text (a leading BOM is dropped); the first undecodable byte is reported with line, column and offset."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        start = exc.start
        line = data.count(b"\n", 0, start) + 1
        column = start - (data.rfind(b"\n", 0, start) + 1) + 1
        byte = data[start:start + 1].hex()
        raise InputError(source, line, None, f"not UTF-8 text: {exc.reason} (byte 0x{byte} at offset {start}); "
                                             "is this a binary file?", column=column) from None


def read_text(path: Path, *, what: str = "file") -> str:
    """`read_bytes` then `decode_text`."""
    return decode_text(read_bytes(path, what=what), str(path))


# -------------------------------------------------------------------------------------------- JSON

#: Strings (skipped whole), brackets, and integer literals longer than MAX_INT_DIGITS (not part of a
#: fraction or exponent: those parse as floats, checked for overflow instead).
_SCAN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]|(?<![\d.eE+-])-?\d{%d,}(?![\d.eE])' % (MAX_INT_DIGITS + 1))
_PATH_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},:]')


def _line_col(text: str, offset: int) -> tuple[int, int]:
    return text.count("\n", 0, offset) + 1, offset - (text.rfind("\n", 0, offset) + 1) + 1


def format_field_path(parts: list[str | int]) -> str:
    shown: list[str | int] = parts if len(parts) <= 8 else [*parts[:4], "...", *parts[-3:]]
    out = "$"
    for p in shown:
        out += "..." if p == "..." else (f"[{p}]" if isinstance(p, int) else (f".{p}" if re.fullmatch(r"[A-Za-z_][\w-]*", p)
                                                                      else f"[{json.dumps(p)}]"))
    return out


def json_path_at(text: str, offset: int) -> str:
    """The JSON path of the value at `offset` of a (possibly invalid) JSON text, e.g. ``$.output[2].content``."""
    stack: list[list[Any]] = []  # ["{", key, expecting_key] or ["[", index]
    for m in _PATH_TOKENS.finditer(text, 0, offset):
        tok = m.group()
        if tok == "{":
            stack.append(["{", None, True])
        elif tok == "[":
            stack.append(["[", 0])
        elif tok in "]}":
            if stack:
                stack.pop()
        elif tok == ",":
            if stack and stack[-1][0] == "[":
                stack[-1][1] += 1
            elif stack:
                stack[-1][1], stack[-1][2] = None, True
        elif tok == ":":
            if stack and stack[-1][0] == "{":
                stack[-1][2] = False
        elif stack and stack[-1][0] == "{" and stack[-1][2]:
            try:
                stack[-1][1] = json.loads(tok)
            except ValueError:
                stack[-1][1] = tok.strip('"')
    parts: list[str | int] = []
    for frame in stack:
        if frame[0] == "[":
            parts.append(frame[1])
        elif frame[1] is not None:
            parts.append(str(frame[1]))
    return format_field_path(parts)


def _problem_at(text: str, offset: int, source: str, problem: str, line_base: int) -> InputError:
    line, col = _line_col(text, offset)
    return InputError(source, line + line_base, json_path_at(text, offset), problem, column=col)


def scan_json(text: str, source: str, *, line_base: int = 0) -> None:
    """Refuse nesting deeper than MAX_DEPTH and integers longer than MAX_INT_DIGITS before `json.loads` sees them."""
    depth = 0
    for m in _SCAN.finditer(text):
        c = m.group()[0]
        if c == '"':
            continue
        if c in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise _problem_at(text, m.start(), source, f"nested deeper than {MAX_DEPTH} levels", line_base)
        elif c in "]}":
            depth -= 1
        else:
            digits = len(m.group().lstrip("-"))
            raise _problem_at(text, m.start(), source, f"integer with {digits} digits; the limit is {MAX_INT_DIGITS}",
                              line_base)


class _NotFinite(Exception):
    def __init__(self, literal: str) -> None:
        self.literal = literal


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise _NotFinite(literal)
    return value


def _constant(literal: str) -> float:
    raise _NotFinite(literal)


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object as a dict, refusing a key given twice (`json` would keep the last one silently)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return obj


def _second_key_offset(text: str, key: str) -> int:
    """Offset of the second `"key":` in `text` (where a duplicate most likely is; 0 when not found)."""
    hits = [m.start() for m in re.finditer(re.escape(json.dumps(key)) + r"\s*:", text)]
    return hits[1] if len(hits) > 1 else 0


def _locate_literal(text: str, literal: str) -> int:
    """Offset of the first `literal` outside strings (0 when not found)."""
    pattern = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|(?<![\w.+-])' + re.escape(literal) + r"(?![\w.])")
    for m in pattern.finditer(text):
        if not m.group().startswith('"'):
            return m.start()
    return 0


def parse_json(text: str, source: str, *, line_base: int = 0) -> Any:
    """One JSON document; every problem is an `InputError` (lines counted from `line_base` + 1)."""
    scan_json(text, source, line_base=line_base)
    try:
        return json.loads(text, parse_float=_finite_float, parse_constant=_constant, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        # json's messages end in "at" / "starting at" (the position follows): the line and column say where
        msg = re.sub(r"(?: starting)? at$", "", exc.msg)
        raise _problem_at(text, exc.pos, source, f"not valid JSON: {msg}", line_base) from None
    except _DuplicateKey as exc:
        raise _problem_at(text, _second_key_offset(text, exc.key), source,
                          f"duplicate key {exc.key[:60]!r} in one object (JSON would keep only the last)",
                          line_base) from None
    except _NotFinite as exc:
        raise _problem_at(text, _locate_literal(text, exc.literal), source,
                          f"number {exc.literal[:40]} is not a finite float", line_base) from None
    except (RecursionError, ValueError) as exc:  # belt and braces: the scan should have caught these
        raise InputError(source, None, None, f"cannot be parsed as JSON: {exc}") from None


def load_json(path: Path, *, what: str = "JSON file") -> Any:
    """One JSON document from a file."""
    text = read_text(path, what=what)
    if not text.strip():
        raise InputError(str(path), None, None, f"empty {what}")
    return parse_json(text, str(path))


#: JSON-lines line breaks: LF, CRLF and a lone CR. Not `str.splitlines`, which also breaks at
#: U+2028, U+2029, U+0085 and other characters valid raw inside a JSON string (the control
#: characters it splits at cannot occur in valid JSON at all, so ignoring them loses nothing).
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def json_lines(text: str) -> list[tuple[int, str]]:
    """(1-based line number, text) of every non-blank line of a JSON-lines text."""
    return [(k, line) for k, line in enumerate(_LINE_BREAK.split(text), 1) if line.strip()]


def parse_json_lines(text: str, source: str) -> list[tuple[int, Any]]:
    """(line number, value) of every non-blank line of a JSON-lines text."""
    return [(lineno, parse_json(line, source, line_base=lineno - 1)) for lineno, line in json_lines(text)]


def parse_json_documents(text: str, source: str) -> list[Any]:
    """One JSON value, a JSON list of values, or JSON lines → the list of values."""
    if not text.strip():
        raise InputError(source, None, None, "empty file")
    try:
        value = parse_json(text, source)
    except InputError as exc:
        first_line_ok = exc.line is not None and exc.line > 1 and exc.problem.startswith("not valid JSON: Extra data")
        if not first_line_ok:
            raise
        return [v for _, v in parse_json_lines(text, source)]
    return value if isinstance(value, list) else [value]


def load_json_documents(path: Path, *, what: str = "file") -> list[Any]:
    """`parse_json_documents` of a file."""
    return parse_json_documents(read_text(path, what=what), str(path))


# -------------------------------------------------------------------------------------------- YAML


#: A UTF-16 surrogate code point: YAML's "\ud800" escape yields one (PyYAML does not even join an escaped
#: pair into one character), and no UTF-8 text can hold it.
_SURROGATE = re.compile("[\ud800-\udfff]")


#: The YAML core tags a JSON document can hold (`merge` is the `<<` key); a date, `!!binary`, `!!set`, `!!omap` or
#: `!!pairs` would construct a value no JSON file, digest or report can carry.
_JSON_TAGS = frozenset(f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "seq", "map", "merge"))


def parse_yaml(text: str, source: str) -> Any:
    """A YAML document (safe loader) under the same depth and integer limits; problems are `InputError`s."""
    import yaml

    def check_scalar(node: Any, path: list[str | int]) -> None:
        """Integers longer than MAX_INT_DIGITS and non-finite floats, named by their place in the document."""
        mark = node.start_mark
        if node.tag == "tag:yaml.org,2002:int":
            digits = sum(ch.isdigit() for ch in str(node.value))
            if digits > MAX_INT_DIGITS:
                raise InputError(source, mark.line + 1, format_field_path(path),
                                 f"integer with {digits} digits; the limit is {MAX_INT_DIGITS}", column=mark.column + 1)
        elif node.tag == "tag:yaml.org,2002:str" and (surrogate := _SURROGATE.search(node.value)):
            at = surrogate.start()
            raise InputError(source, mark.line + 1, format_field_path(path),
                             f"string holds the surrogate U+{ord(node.value[at]):04X} at index {at}; text must be "
                             "valid Unicode (write the character itself, or a \\U escape of 8 hex digits)",
                             column=mark.column + 1)
        elif node.tag == "tag:yaml.org,2002:float":
            value = yaml.SafeLoader.construct_yaml_float(yaml.SafeLoader(""), node)
            if not math.isfinite(value):
                raise InputError(source, mark.line + 1, format_field_path(path),
                                 f"number {str(node.value)[:40]} is not a finite float", column=mark.column + 1)

    expansion_limit = max(YAML_EXPANSION_FLOOR, YAML_EXPANSION_FACTOR * len(text))

    class _Loader(yaml.SafeLoader):
        """Counts nesting and nodes and checks numbers while composing, before any value is constructed.

        An alias repeats its anchor's whole subtree wherever it is used, so it counts as that many
        nodes and that much nesting: nested aliases of aliases ("billion laughs") would otherwise
        build a document exponentially larger and deeper than its text, which every later walk
        (validation, digests, JSON dumps) would then have to traverse.
        """

        def __init__(self, stream: str) -> None:
            super().__init__(stream)
            self._path: list[str | int] = []
            #: id(node) -> (weight, levels) of its subtree with every alias expanded (weight: nodes plus
            #: scalar characters); the nodes stay alive in the document being composed, so ids are stable
            self._expanded: dict[int, tuple[int, int]] = {}

        def _problem(self, mark: Any, problem: str) -> InputError:
            return InputError(source, mark.line + 1, format_field_path(self._path), problem, column=mark.column + 1)

        def compose_node(self, parent: Any, index: Any) -> Any:  # type: ignore[override]
            if parent is not None:  # a mapping key is composed with index None, its value with the key node
                self._path.append(index if isinstance(index, int) else
                                  (str(index.value) if index is not None else "<key>"))
            try:
                if len(self._path) > MAX_DEPTH:
                    raise self._problem(self.peek_event().start_mark, f"nested deeper than {MAX_DEPTH} levels")
                alias = self.peek_event() if self.check_event(yaml.AliasEvent) else None
                node = super().compose_node(parent, index)
                if alias is not None:
                    self._check_alias(node, alias)
                    return node
                if node.tag not in _JSON_TAGS and node.tag.startswith("tag:yaml.org,2002:"):
                    kind = node.tag.removeprefix("tag:yaml.org,2002:")
                    hint = "; quote it to make it a string" if kind in ("timestamp", "binary") else ""
                    raise self._problem(node.start_mark, f"a YAML {kind} is not JSON data (strings, numbers, booleans, "
                                                         f"null, lists and mappings only){hint}")
                if isinstance(node, yaml.ScalarNode):
                    check_scalar(node, self._path)
                elif isinstance(node, yaml.MappingNode):
                    self._check_unique_keys(node)
                self._count(node)
                return node
            finally:
                if parent is not None:
                    self._path.pop()

        def _check_unique_keys(self, node: Any) -> None:
            """A key given twice in one mapping is refused (YAML says keys are unique; PyYAML keeps the last)."""
            seen: set[str] = set()
            for key, _ in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    if key.value in seen:
                        raise InputError(source, key.start_mark.line + 1, format_field_path([*self._path, key.value]),
                                         f"duplicate key {key.value[:60]!r}: it is already set in this mapping",
                                         column=key.start_mark.column + 1)
                    seen.add(key.value)

        def _check_alias(self, node: Any, alias: Any) -> None:
            """An alias is refused when it refers to its own ancestor or expands past the depth limit."""
            if id(node) not in self._expanded:  # its anchor is still being composed: an infinite document
                raise self._problem(alias.start_mark, f"alias *{alias.anchor} refers to a node that contains it "
                                                      "(a recursive YAML alias)")
            levels = self._expanded[id(node)][1]
            if len(self._path) + levels > MAX_DEPTH:
                raise self._problem(alias.start_mark, f"alias *{alias.anchor} expands to nesting deeper than "
                                                      f"{MAX_DEPTH} levels")

        def _count(self, node: Any) -> None:
            """Record a composed node's expanded weight; refuse the document once one node exceeds the limit."""
            if isinstance(node, yaml.SequenceNode):
                children = list(node.value)
            elif isinstance(node, yaml.MappingNode):
                children = [child for pair in node.value for child in pair]
            else:
                children = []
            sizes = [self._expanded[id(child)] for child in children]
            weight = 1 + (sum(w for w, _ in sizes) if children else len(str(node.value)))
            levels = (1 + max((d for _, d in sizes), default=0)) if children else 0
            self._expanded[id(node)] = (weight, levels)
            if weight > expansion_limit:
                raise self._problem(node.start_mark, f"expands to {weight} nodes and scalar characters counting "
                                                     f"every use of an alias; the limit for this {len(text)}-character "
                                                     f"document is {expansion_limit} (a YAML alias bomb)")

    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.reader.ReaderError as exc:  # a character YAML refuses (NUL, most control characters): its place
        at = max(0, min(int(exc.position), len(text)))
        line = text.count("\n", 0, at) + 1
        column = at - (text.rfind("\n", 0, at) + 1) + 1
        char = exc.character if isinstance(exc.character, int) else ord(exc.character)
        raise InputError(source, line, None, f"not valid YAML: character U+{char:04X} is not allowed ({exc.reason})",
                         column=column) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = f"not valid YAML: {exc.problem or exc.context}"
        if mark is None:
            raise InputError(source, None, None, problem) from None
        raise InputError(source, mark.line + 1, None, problem, column=mark.column + 1) from None
    except yaml.YAMLError as exc:
        raise InputError(source, None, None, f"not valid YAML: {exc}") from None
    except RecursionError:  # belt and braces: the composer's depth check should stop first
        raise InputError(source, None, None, f"nested deeper than {MAX_DEPTH} levels") from None


def load_yaml(path: Path, *, what: str = "YAML file") -> Any:
    """One YAML document from a file (an empty one is an error, as for JSON)."""
    text = read_text(path, what=what)
    if not text.strip():
        raise InputError(str(path), None, None, f"empty {what}")
    return parse_yaml(text, str(path))


def load_structured(path: Path, *, what: str = "file") -> Any:
    """A .yaml/.yml file as YAML, anything else as one JSON document."""
    if Path(path).suffix in (".yaml", ".yml"):
        return load_yaml(path, what=what)
    return load_json(path, what=what)


__all__ = [
    "DEFAULT_MAX_INPUT_BYTES",
    "InputError",
    "MAX_BYTES_ENV",
    "MAX_DEPTH",
    "MAX_INPUT_BYTES_CEILING",
    "MAX_INT_DIGITS",
    "YAML_EXPANSION_FACTOR",
    "YAML_EXPANSION_FLOOR",
    "decode_text",
    "format_field_path",
    "json_lines",
    "json_path_at",
    "limits_help",
    "load_json",
    "load_json_documents",
    "load_structured",
    "load_yaml",
    "max_input_bytes",
    "parse_json",
    "parse_json_documents",
    "parse_json_lines",
    "parse_yaml",
    "read_bytes",
    "read_text",
    "scan_json",
]
