"""Red-team inputs to the shared reader: JSON-lines breaks, the size-cap variable, special files, YAML aliases."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from compactsim.harness.core.errors import ConfigError
from compactsim.harness.core.json_input import (
    DEFAULT_MAX_INPUT_BYTES,
    MAX_BYTES_ENV,
    YAML_EXPANSION_FLOOR,
    InputError,
    json_lines,
    limits_help,
    load_json,
    load_json_documents,
    load_yaml,
    max_input_bytes,
    parse_json_documents,
    parse_json_lines,
    parse_yaml,
    read_bytes,
)


def _err(fn, *args, **kw) -> InputError:
    with pytest.raises(InputError) as info:
        fn(*args, **kw)
    return info.value


# ------------------------------------------------------------------------------------ JSON lines


@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\u0085", "\x1c", "\x0b"])
def test_json_lines_break_only_at_lf_crlf_and_cr(char):
    # str.splitlines() also breaks at these, cutting a valid JSON string in two
    text = '{"a": "x' + char + 'y"}\r\n{"b": 2}\n'
    if char in "\u2028\u2029\u0085":  # valid raw inside a JSON string
        assert parse_json_lines(text, "r.jsonl") == [(1, {"a": "x" + char + "y"}), (2, {"b": 2})]
        assert parse_json_documents(text, "r.jsonl") == [{"a": "x" + char + "y"}, {"b": 2}]
    else:  # a raw control character is invalid JSON wherever it is: still refused, on its own line
        assert _err(parse_json_lines, text, "r.jsonl").line == 1


def test_json_lines_numbers_lines_for_every_line_ending():
    assert json_lines('{"a":1}\r\n\r\n{"b":2}\r{"c":3}\n  \n{"d":4}') == [
        (1, '{"a":1}'), (3, '{"b":2}'), (4, '{"c":3}'), (6, '{"d":4}')]
    assert _err(parse_json_lines, '{"a":1}\r\n{"b":\u2028}\n', "r.jsonl").line == 2


# ------------------------------------------------------------------------------------ size cap variable


@pytest.mark.parametrize("value", ["x", "", "0", "-5", "1_000", "1e6", "9" * 400, "9" * 5000, "\u0661\u0662",
                                   str(2**50 + 1)])
def test_bad_size_cap_is_a_config_error_and_help_still_renders(value, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(MAX_BYTES_ENV, value)
    with pytest.raises(ConfigError) as info:
        max_input_bytes()
    assert info.value.code == "invalid_argument"
    assert info.value.detail.startswith(f"{MAX_BYTES_ENV}=")
    assert info.value.detail.endswith(": expected a positive integer number of bytes, at most 1125899906842624 (2**50)")
    text = limits_help()  # called while the CLI registers its commands: must never raise
    assert text.startswith("Input limits: files up to 256 MiB by default (env COMPACTSIM_MAX_INPUT_BYTES; its current "
                           "value is invalid, so commands that read a file exit 2: ")


def test_valid_size_caps_are_read(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    for value, expected in ((" 2048 ", 2048), ("1", 1), (str(2**50), 2**50)):
        monkeypatch.setenv(MAX_BYTES_ENV, value)
        assert max_input_bytes() == expected
    path = tmp_path / "a.json"
    path.write_text('{"a": 1}')
    assert load_json(path) == {"a": 1}  # a 1 PiB cap reads in bounded chunks, no huge allocation or overflow
    monkeypatch.delenv(MAX_BYTES_ENV)
    assert max_input_bytes() == DEFAULT_MAX_INPUT_BYTES
    assert limits_help().startswith("Input limits: files up to 256 MiB (env COMPACTSIM_MAX_INPUT_BYTES), nesting")


def _cli(args: list[str], env_value: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, MAX_BYTES_ENV: env_value}
    return subprocess.run([sys.executable, "-c", "import sys; from compactsim.harness.cli import app; "
                           "sys.argv[0] = 'compactsim'; app()", *args],
                          capture_output=True, text=True, env=env, timeout=120, check=False)


def test_cli_help_and_commands_with_a_bad_size_cap(tmp_path: Path):
    out = _cli(["plan", "--help"], "x")
    assert out.returncode == 0, out.stderr
    assert "its current value is invalid" in " ".join(out.stdout.split())
    path = tmp_path / "r.json"
    path.write_text("{}")
    out = _cli(["plan", str(path)], "9" * 400)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"error: invalid_argument: {MAX_BYTES_ENV}='{'9' * 37}...': expected a positive integer number of bytes, "
        "at most 1125899906842624 (2**50)"]


# ------------------------------------------------------------------------------------ special files


def _finishes(fn, *args) -> BaseException | None:
    """Run fn(*args) in a thread; fail if it blocks (as reading a FIFO with no writer would)."""
    box: list[BaseException | None] = []

    def target() -> None:
        try:
            fn(*args)
            box.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            box.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(10)
    assert box, f"{fn.__name__} blocked on {args}"
    return box[0]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_a_fifo_is_refused_without_blocking(tmp_path: Path):
    fifo = tmp_path / "results.json"
    os.mkfifo(fifo)
    link = tmp_path / "link.jsonl"
    link.symlink_to(fifo)
    for path, reader in ((fifo, load_json_documents), (link, load_json), (fifo, load_yaml)):
        start = time.monotonic()
        exc = _finishes(reader, path)
        assert isinstance(exc, InputError), exc
        assert exc.source == str(path)
        assert exc.problem.startswith("is a named pipe (FIFO), not a regular file (expected a ")
        assert time.monotonic() - start < 5


def test_a_character_device_is_refused():
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero")
    exc = _finishes(read_bytes, Path("/dev/zero"))
    assert isinstance(exc, InputError)
    assert exc.problem == "is a character device, not a regular file (expected a file); it is not read"


# ------------------------------------------------------------------------------------ YAML aliases

BOMB = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{b}: &{b} [{', '.join(['*' + a] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi"))


def test_yaml_alias_bomb_is_refused_naming_file_line_and_field():
    start = time.monotonic()
    e = _err(parse_yaml, BOMB, "trainer.yaml")
    assert time.monotonic() - start < 5
    # weights (nodes + scalar characters): a 37, b 334, c 3007, d 27064, e 243577, f 2192194 > the floor
    assert (e.source, e.line, e.column, e.field) == ("trainer.yaml", 6, 4, "$.f")
    assert e.problem == (f"expands to 2192194 nodes and scalar characters counting every use of an alias; the limit "
                         f"for this {len(BOMB)}-character document is {YAML_EXPANSION_FLOOR} (a YAML alias bomb)")
    assert isinstance(e, ConfigError) and e.code == "invalid_argument"


def test_yaml_bomb_in_a_file_is_refused(tmp_path: Path):
    path = tmp_path / "settings.yaml"
    path.write_text(BOMB)
    assert str(_err(load_yaml, path)).startswith(f"invalid_argument: {path}:6:4: field $.f: expands to 2192194 nodes")


def test_recursive_yaml_alias_is_refused():
    e = _err(parse_yaml, "a: &x [1, *x]\n", "s.yaml")
    assert (e.line, e.field, e.problem) == (1, "$.a[1]", "alias *x refers to a node that contains it (a recursive "
                                                          "YAML alias)")


def test_yaml_alias_expanding_past_the_depth_limit_is_refused():
    deep = "[" * 40 + "1" + "]" * 40
    e = _err(parse_yaml, f"a: &d {deep}\nb: [[[[[[[[[[[[[[[[[[[[[[[[[[[[[*d]]]]]]]]]]]]]]]]]]]]]]]]]]]]]\n", "s.yaml")
    assert (e.line, e.problem) == (2, "alias *d expands to nesting deeper than 64 levels")


def test_modest_yaml_anchors_and_merge_keys_still_work():
    text = "base: &t {lr: 0.1, steps: 2}\nx: *t\ny: {<<: *t, steps: 3}\nl: &l [1, 2]\nm: [*l, *l]\n"
    assert parse_yaml(text, "s.yaml") == {"base": {"lr": 0.1, "steps": 2}, "x": {"lr": 0.1, "steps": 2},
                                          "y": {"lr": 0.1, "steps": 3}, "l": [1, 2], "m": [[1, 2], [1, 2]]}


def test_one_long_scalar_aliased_many_times_is_refused():
    """Few nodes, but 50,000 uses of a 100 KB string would be 5 GB of text for every later dump or digest."""
    text = "a: &a " + "x" * 100_000 + "\nb: [" + ", ".join(["*a"] * 50_000) + "]\n"
    e = _err(parse_yaml, text, "s.yaml")
    assert (e.line, e.field) == (2, "$.b") and "(a YAML alias bomb)" in e.problem


def test_a_large_document_without_aliases_is_not_mistaken_for_a_bomb():
    """Size is the byte cap's business: a 2 MB scalar weighs past the floor, but only its own length (the
    limit grows with the text), so a document without aliases is never refused as a bomb."""
    text = "notes: " + "x" * (2 * YAML_EXPANSION_FLOOR) + "\n"
    assert len(parse_yaml(text, "s.yaml")["notes"]) == 2 * YAML_EXPANSION_FLOOR


@pytest.mark.parametrize(("text", "line", "field", "says"), [
    ("a: 1\nb: 2\na: 3\n", 3, "$.a", "duplicate key 'a'"),
    ("s:\n  - name: x\n    name: y\n", 3, "$.s[0].name", "duplicate key 'name'"),
    ('t: "a\\ud800b"\n', 1, "$.t", "the surrogate U+D800 at index 1"),
    ('t: ["\\udc80"]\n', 1, "$.t[0]", "the surrogate U+DC80 at index 0"),
    ('t: "\\ud83d\\ude00"\n', 1, "$.t", "the surrogate U+D83D at index 0"),  # PyYAML does not join the pair
    # values no JSON document holds (a tool call's arguments reached the server's JSON encoder as a date)
    ("x: 1\nargs: {d: 2024-01-01}\n", 2, "$.args.d", "a YAML timestamp is not JSON data"),
    ("b: !!binary aGVsbG8=\n", 1, "$.b", "a YAML binary is not JSON data"),
    ("s: !!set {a, b}\n", 1, "$.s", "a YAML set is not JSON data"),
    ("o: !!omap [a: 1]\n", 1, "$.o", "a YAML omap is not JSON data"),
])
def test_yaml_duplicate_keys_and_surrogates_are_named_where_they_are(text, line, field, says):
    """PyYAML keeps the last of two equal keys, builds strings no UTF-8 output can hold and dates, bytes and sets no
    JSON output can: all refused here."""
    with pytest.raises(InputError) as err:
        parse_yaml(text, "s.yaml")
    assert (err.value.line, err.value.field) == (line, field)
    assert says in err.value.problem


def test_yaml_non_bmp_escapes_merge_keys_and_equal_keys_in_different_mappings_are_fine():
    assert parse_yaml('t: "\\U0001F600 \U0001F600"\n', "s.yaml") == {"t": "\U0001F600 \U0001F600"}
    assert parse_yaml("a: {k: 1}\nb: {k: 2}\n", "s.yaml") == {"a": {"k": 1}, "b": {"k": 2}}
    assert parse_yaml("base: &b {k: 1}\nc:\n  <<: *b\n  j: 2\n", "s.yaml")["c"] == {"k": 1, "j": 2}


def test_json_duplicate_keys_are_refused_naming_line_and_object(tmp_path: Path):
    """`json` keeps the last of two equal keys; a hand-edited manifest or dump line must not win silently."""
    path = tmp_path / "d.json"
    path.write_text('{"a": 1,\n "b": {"x": 1, "x": 2}}\n')
    err = _err(load_json, path)
    assert (err.line, err.field) == (2, "$.b")
    assert "duplicate key 'x' in one object" in err.problem
    lines_err = _err(parse_json_lines, '{"k": 1}\n{"k": 2, "k": 3}\n', "rows.jsonl")
    assert lines_err.line == 2 and "duplicate key 'k'" in lines_err.problem


def test_a_character_yaml_refuses_is_one_line_with_its_place():
    """PyYAML's ReaderError spans two lines and names a "<unicode string>" position; here it is file:line:column."""
    with pytest.raises(InputError) as err:
        parse_yaml('a: 1\nb: "x\x00y"\n', "s.yaml")
    assert (err.value.line, err.value.column) == (2, 6)
    assert err.value.problem == "not valid YAML: character U+0000 is not allowed (special characters are not allowed)"
    assert "\n" not in str(err.value)
