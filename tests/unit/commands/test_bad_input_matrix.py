"""Every command that reads a file: bad input exits 2 with one line naming file, line and field — never a traceback.

Rows: binary garbage, invalid UTF-8, 100k nested brackets (Python's parsers recurse), a 5,000-digit
integer (Python refuses > 4,300 digits), an empty file, a missing file and a file over the size cap
(lowered through COMPACTSIM_MAX_INPUT_BYTES). Columns: each command and option that reads a file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from compactsim.harness.cli import app
from compactsim.harness.core.json_input import MAX_BYTES_ENV, MAX_DEPTH, MAX_INT_DIGITS, limits_help

runner = CliRunner()

#: name -> (file suffix, argv builder given the bad file and a scratch directory)
COMMANDS: dict[str, tuple[str, Callable[[Path, Path], list[str]]]] = {
    "plan": (".json", lambda f, d: ["plan", str(f)]),
    "plan --json": (".json", lambda f, d: ["plan", "--json", str(f)]),
    "materialize": (".jsonl", lambda f, d: ["materialize", str(f)]),
    "replay": (".json", lambda f, d: ["replay", str(f)]),
    "verify rows": (".jsonl", lambda f, d: ["verify", str(d / "no-goldens"), str(f)]),
    "verify --metrics": (".jsonl", lambda f, d: ["verify", str(d / "no-goldens"), str(_good_rows(d)),
                                                 "--metrics", str(f)]),
    "gym-check --payloads": (".json", lambda f, d: ["gym-check", "--gym", "nemo-gym==0.7.0", "--offline",
                                                    "--cache-dir", str(d / "cache"), "--out", str(d / "gc"),
                                                    "--payloads", str(f)]),
    "serve --settings json": (".json", lambda f, d: ["serve", "--settings", str(f), "--port", "1"]),
    "serve --settings yaml": (".yaml", lambda f, d: ["serve", "--settings", str(f), "--port", "1"]),
    "run FILE.yaml": (".yaml", lambda f, d: ["run", str(f), "--out", str(d / "out")]),
    "run --gym-check": (".json", lambda f, d: ["run", "no-compaction", "--out", str(d / "out"), "--gym-check", str(f)]),
    "export FILE.yaml": (".yaml", lambda f, d: ["export", str(f), "--out", str(d / "g")]),
    "train FILE.yaml": (".yaml", lambda f, d: ["train", str(f), "--out", str(d / "t")]),
    "shrink FILE.yaml": (".yaml", lambda f, d: ["shrink", str(f), "--out", str(d / "s")]),
}


def _good_rows(d: Path) -> Path:
    path = d / "rows.jsonl"
    path.write_text('{"scenario":"s","step":0,"error":{"code":"x"}}\n')  # under the 64-byte cap
    return path


def _deep(suffix: str) -> str:
    nest = "[" * 100_000 + "]" * 100_000
    return f"scenarios: {nest}\n" if suffix == ".yaml" else nest


def _bigint(suffix: str) -> str:
    digits = "9" * 5000
    return f"scenarios:\n  - steps: {digits}\n" if suffix == ".yaml" else '{"a": [1, ' + digits + "]}"


#: name -> (content builder, the problem the message must state, expected "line:column" or None)
BAD: dict[str, tuple[Callable[[str], bytes], str, str | None]] = {
    "binary": (lambda s: bytes(range(256)) * 4, "not UTF-8 text: invalid start byte (byte 0x80 at offset 128)", "2:118"),
    "invalid-utf8": (lambda s: b'{"a": "\xc3\x28"}', "not UTF-8 text: invalid continuation byte (byte 0xc3 at offset 7)",
                     "1:8"),
    "deep": (lambda s: _deep(s).encode(), f"nested deeper than {MAX_DEPTH} levels", None),
    "bigint": (lambda s: _bigint(s).encode(), f"integer with 5000 digits; the limit is {MAX_INT_DIGITS}", None),
    "empty": (lambda s: b"", "empty", None),
    "missing": (lambda s: b"", "file not found", None),
    "oversize": (lambda s: b'{"a": "' + b"x" * 100 + b'"}', "the limit is 64 bytes", None),
}

#: Where each deep / bigint problem is, per file kind (line:column and field).
LOCATION = {
    ("deep", ".json"): ("1:65", "$[0][0][0][0]...[0][0][0]"),
    ("deep", ".jsonl"): ("1:65", "$[0][0][0][0]...[0][0][0]"),
    ("deep", ".yaml"): ("1:76", "$.scenarios[0][0][0]...[0][0][0]"),
    ("bigint", ".json"): ("1:11", "$.a[1]"),
    ("bigint", ".jsonl"): ("1:11", "$.a[1]"),
    ("bigint", ".yaml"): ("2:12", "$.scenarios[0].steps"),
}


@pytest.mark.parametrize("bad", list(BAD))
@pytest.mark.parametrize("command", list(COMMANDS))
def test_bad_input_exits_2_with_one_line(command: str, bad: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    suffix, argv = COMMANDS[command]
    build, problem, line_col = BAD[bad]
    path = tmp_path / f"input{suffix}"
    if bad != "missing":
        path.write_bytes(build(suffix))
    if bad == "oversize":
        monkeypatch.setenv(MAX_BYTES_ENV, "64")
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, argv(path, tmp_path))
    text = result.stdout + result.stderr
    assert result.exit_code == 2, text
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in text
    if command.endswith("--json"):
        assert f'"file": "{path}"' in result.stdout and problem in result.stdout
        return
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, text
    assert str(path) in lines[0] and problem in lines[0], lines[0]
    if line_col is not None:
        assert f"{path}:{line_col}:" in lines[0]
    if (bad, suffix) in LOCATION:
        where, field = LOCATION[(bad, suffix)]
        assert f"{path}:{where}: field {field}: {problem}" in lines[0]


def test_deep_json_message_is_exact(tmp_path: Path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    result = runner.invoke(app, ["plan", str(path)])
    assert (result.exit_code, result.stderr) == (
        2, f"error: invalid_argument: {path}:1:65: field $[0][0][0][0]...[0][0][0]: nested deeper than 64 levels\n")


def test_unterminated_string_has_no_doubled_at(tmp_path: Path):
    path = tmp_path / "u.json"
    path.write_text('{"response": "abc')
    result = runner.invoke(app, ["plan", str(path)])
    assert (result.exit_code, result.stderr) == (
        2, f"error: invalid_argument: {path}:1:14: field $.response: not valid JSON: Unterminated string\n")
    assert "at at" not in result.stderr


def test_verify_on_an_empty_rows_dump_is_a_malformed_dump_not_zero_steps(tmp_path: Path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("\n\n")
    result = runner.invoke(app, ["verify", str(tmp_path), str(rows)])
    assert (result.exit_code, result.stderr) == (
        2, f"error: invalid_argument: {rows}: empty rows dump: no row and no error line\n")


@pytest.mark.parametrize("command", ["plan", "materialize", "replay", "verify", "run", "export", "train", "shrink",
                                     "serve", "gym-check"])
def test_help_states_the_input_limits(command: str):
    result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0
    flat = " ".join(result.stdout.split())
    assert " ".join(limits_help().split()) in flat
    assert "256 MiB" in flat and f"{MAX_DEPTH} levels" in flat and f"{MAX_INT_DIGITS} digits" in flat
