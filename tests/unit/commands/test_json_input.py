"""The shared input reader: exact one-line messages for each problem, the limits, and what it still accepts."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from compactsim.harness.core.json_input import (
    InputError,
    json_path_at,
    load_json,
    load_json_documents,
    load_yaml,
    parse_json,
    parse_json_documents,
    parse_yaml,
)
from compactsim.harness.golden.rows_dump import RowsDumpError


def _err(fn, *args, **kw) -> InputError:
    with pytest.raises(InputError) as info:
        fn(*args, **kw)
    return info.value


def test_valid_json_values_parse_as_usual():
    assert parse_json('{"a": [1, -2.5e-3, "x\\"[{"], "b": 12345678901234567890}', "f") == {
        "a": [1, -0.0025, 'x"[{'], "b": 12345678901234567890}
    assert parse_json("[" * 64 + "]" * 64, "f") == eval("[" * 64 + "]" * 64)  # exactly at the depth limit


def test_depth_limit_names_line_column_and_path():
    e = _err(parse_json, '{"response": {"output": [' + "[" * 70 + "]" * 70 + "]}}", "p.json")
    assert str(e) == ("invalid_argument: p.json:1:87: field $.response.output[0][0]...[0][0][0]: nested deeper than "
                      "64 levels")
    assert (e.source, e.line, e.column) == ("p.json", 1, 87)


def test_long_integer_is_refused_but_long_fractions_are_floats():
    e = _err(parse_json, '{"reward":\n 1' + "0" * 25 + "}", "p.json")
    assert (e.line, e.column, e.field, e.problem) == (2, 2, "$.reward", "integer with 26 digits; the limit is 20")
    assert parse_json('[0.' + "1" * 40 + "]", "f") == [0.1111111111111111]


def test_non_finite_numbers_are_refused():
    assert _err(parse_json, '{"a": [1, 1e400]}', "f").problem == "number 1e400 is not a finite float"
    assert _err(parse_json, '{"a": [1, 1e400]}', "f").field == "$.a[1]"
    assert _err(parse_json, '{"x": -Infinity}', "f").problem == "number -Infinity is not a finite float"


def test_json_path_at_follows_keys_and_indices():
    text = '{"a": {"b c": [0, {"d": 5}]}, "e": 1}'
    assert json_path_at(text, text.index("5")) == '$.a["b c"][1].d'
    assert json_path_at(text, text.index("1}")) == "$.e"


def test_json_lines_report_the_failing_line():
    e = _err(parse_json_documents, '{"a": 1}\n{"a": 2}\n\n{"a": [1,]}\n', "r.jsonl")
    assert str(e) == "invalid_argument: r.jsonl:4:10: field $.a[1]: not valid JSON: Expecting value"
    assert parse_json_documents('{"a": 1}\n\n{"a": 2}\n', "r.jsonl") == [{"a": 1}, {"a": 2}]
    assert parse_json_documents('[{"a": 1}, {"a": 2}]', "r.json") == [{"a": 1}, {"a": 2}]


def test_files_decoding_bom_missing_and_directories(tmp_path: Path):
    bom = tmp_path / "bom.json"
    bom.write_bytes(b'\xef\xbb\xbf{"a": 1}')
    assert load_json(bom) == {"a": 1}
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"a":\n "\xe2\x82"}')
    assert str(_err(load_json_documents, bad)) == (f"invalid_argument: {bad}:2:3: not UTF-8 text: invalid continuation "
                                                  "byte (byte 0xe2 at offset 8); is this a binary file?")
    assert _err(load_json, tmp_path / "nope.json").problem == "file not found (expected a JSON file)"
    assert _err(load_json, tmp_path).problem == "is a directory, expected a JSON file"


def test_size_cap_comes_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "a.json"
    path.write_text('{"a": "' + "x" * 2000 + '"}')
    monkeypatch.setenv("COMPACTSIM_MAX_INPUT_BYTES", "1024")
    assert _err(load_json, path).problem == ("JSON file is 2009 bytes; the limit is 1 KiB "
                                             "(env COMPACTSIM_MAX_INPUT_BYTES)")
    monkeypatch.setenv("COMPACTSIM_MAX_INPUT_BYTES", "lots")
    with pytest.raises(Exception, match="expected a positive integer"):
        load_json(path)


def test_yaml_limits_and_syntax_errors():
    assert parse_yaml("a: [1, {b: 2}]\n", "s.yaml") == {"a": [1, {"b": 2}]}
    e = _err(parse_yaml, "scenarios:\n  - name: x\n    steps: " + "1" * 30 + "\n", "s.yaml")
    assert str(e) == "invalid_argument: s.yaml:3:12: field $.scenarios[0].steps: integer with 30 digits; the limit is 20"
    e = _err(parse_yaml, "a: " + "[" * 100 + "]" * 100, "s.yaml")
    assert (e.line, e.field, e.problem) == (1, "$.a[0][0][0]...[0][0][0]", "nested deeper than 64 levels")
    e = _err(parse_yaml, "a: [1\nb: 2\n", "s.yaml")
    assert (e.line, e.column, e.field) == (2, 2, None) and e.problem.startswith("not valid YAML: ")
    assert _err(parse_yaml, "x: .inf\n", "s.yaml").problem == "number .inf is not a finite float"


def test_empty_yaml_file_is_an_error(tmp_path: Path):
    path = tmp_path / "s.yaml"
    path.write_text("\n  \n")
    assert str(_err(load_yaml, path)) == f"invalid_argument: {path}: empty YAML file"


def test_errors_survive_pickling_with_their_fields():
    for err in (InputError("f", 3, "$.a", "bad", column=4), RowsDumpError("r.jsonl", 2, "step", "worse")):
        back = pickle.loads(pickle.dumps(err))
        assert (type(back), str(back), back.to_json()) == (type(err), str(err), err.to_json())
