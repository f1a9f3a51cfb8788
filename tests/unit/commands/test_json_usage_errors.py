"""Under `--json`, an option or argument Typer refuses is a JSON error object on stdout, exit 2.

Typer checks bounds (`min=`/`max=`), integers, unknown options and missing arguments while it
parses, and prints a usage box for a person. A command that takes `--json` prints instead the
shape of its other input errors (`OptionError.to_json`: `error_code`, `file`, `line`, `column`,
`field`, `message`, plus `option`, `value`, `min`, `max`, `allowed`); without `--json` the usage
box stays. `test_every_json_command_is_covered` keeps the table complete as commands are added.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from compactsim.harness.cli import app
from compactsim.harness.commands.common import MAX_DP_SIZE, MAX_SEED, MAX_TURNS

runner = CliRunner()

SEED_RANGE = (0, MAX_SEED, f"0<=x<={MAX_SEED}")

#: id -> (argv, option, value, (min, max, allowed) or None, text the message holds).
#: "FILE" is replaced by an existing file, "OUT" by a folder that must never be made.
CASES: dict[str, tuple[list[str], str | None, object, tuple | None, str]] = {
    "run --seed -1": (["run", "no-compaction", "--out", "OUT", "--json", "--seed", "-1"], "--seed", "-1", SEED_RANGE,
                      "Invalid value for '--seed'"),
    "run --steps 0": (["run", "--json", "--steps", "0", "--out", "OUT"], "--steps", "0", (1, None, "x>=1"),
                      "Invalid value for '--steps'"),
    "run --seed abc": (["run", "--json", "--seed", "abc", "--out", "OUT"], "--seed", "abc", SEED_RANGE,
                       "valid integer"),
    "train --dp-size 0": (["train", "no-compaction", "--out", "OUT", "--dp-size", "0", "--json"], "--dp-size", "0",
                          (1, MAX_DP_SIZE, f"1<=x<={MAX_DP_SIZE}"), "Invalid value for '--dp-size'"),
    "train repeated --seed": (["train", "no-compaction", "--out", "OUT", "--json", "--seed", "1", "--seed", "-5"],
                              "--seed", "-5", SEED_RANGE, "Invalid value for '--seed'"),
    "rollout --turns": (["rollout", "--json", "--out", "OUT", "--turns", str(MAX_TURNS + 1)], "--turns",
                        str(MAX_TURNS + 1), (1, MAX_TURNS, f"1<=x<={MAX_TURNS}"), "Invalid value for '--turns'"),
    "materialize --dp-size": (["materialize", "--json", "FILE", "--dp-size", "1000000000"], "--dp-size", "1000000000",
                              (1, MAX_DP_SIZE, f"1<=x<={MAX_DP_SIZE}"), "Invalid value for '--dp-size'"),
    "export --seed": (["export", "no-compaction", "--out", "OUT", "--json", "--seed", str(MAX_SEED + 1)], "--seed",
                      str(MAX_SEED + 1), SEED_RANGE, "Invalid value for '--seed'"),
    "replay --group-size": (["replay", "FILE", "--json", "--group-size", "0"], "--group-size", "0",
                            (1, 2**31 - 1, "1<=x<=2147483647"), "Invalid value for '--group-size'"),
    # past int32 it used to reach the trainer config, whose error named grpo.num_generations_per_prompt, not the option
    "replay --group-size huge": (["replay", "FILE", "--json", "--group-size", str(2**63 - 1)], "--group-size",
                                 str(2**63 - 1), (1, 2**31 - 1, "1<=x<=2147483647"), "Invalid value for '--group-size'"),
    "shrink --max-examples": (["shrink", "no-compaction", "--out", "OUT", "--json", "--max-examples", "0"],
                              "--max-examples", "0", (1, None, "x>=1"), "Invalid value for '--max-examples'"),
    "plan unknown option": (["plan", "--json", "--bogus", "FILE"], "--bogus", None, None, "No such option: --bogus"),
    "plan missing files": (["plan", "--json"], "files", None, None, "Missing argument"),
    "gym-check missing --gym": (["gym-check", "--json", "--offline", "--out", "OUT"], "--gym", None, None,
                                "Missing option"),
    "verify missing rows": (["verify", "--json", "OUT"], "rows_dump", None, None, "Missing argument"),
    "verify option without value": (["verify", "OUT", "FILE", "--json", "--metrics"], "--metrics", None, None,
                                    "requires an argument"),
    "list unknown option": (["list", "--json", "--bogus"], "--bogus", None, None, "No such option"),
    "show missing name": (["show", "--json"], "name", None, None, "Missing argument"),
    "scenarios list --tag": (["scenarios", "list", "--json", "--tag"], "--tag", None, None, "requires an argument"),
    "scenarios show extra": (["scenarios", "show", "--json", "no-compaction", "extra"], None, None, None,
                             "unexpected extra argument"),
}


def _argv(argv: list[str], tmp_path: Path) -> list[str]:
    file = tmp_path / "input.json"
    file.write_text("{}")
    return [str(file) if a == "FILE" else str(tmp_path / "o") if a == "OUT" else a for a in argv]


@pytest.mark.parametrize("case", list(CASES))
def test_a_refused_option_under_json_prints_a_json_error_and_exits_2(case: str, tmp_path: Path):
    argv, option, value, bounds, text = CASES[case]
    result = runner.invoke(app, _argv(argv, tmp_path))
    assert result.exit_code == 2, result.output
    assert result.stderr == "", result.stderr  # no usage box
    error = json.loads(result.stdout)
    minimum, maximum, allowed = bounds or (None, None, None)
    assert error == {
        "error_code": "invalid_argument", "file": None, "line": None, "column": None, "field": option,
        "option": option, "value": value, "min": minimum, "max": maximum, "allowed": allowed,
        "message": error["message"],
    }
    assert text in error["message"]
    if isinstance(value, str):
        assert f"got {value!r}" in error["message"]
    if allowed is not None:
        assert error["message"].endswith(f"; allowed: {allowed}")
    assert not (tmp_path / "o").exists()  # refused before any work


def _json_commands() -> set[str]:
    def walk(command, path: tuple[str, ...]):
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, (*path, name))
        if any("--json" in (getattr(p, "opts", None) or ()) for p in command.params):
            yield " ".join(path)

    return set(walk(typer.main.get_command(app), ()))


def test_every_json_command_is_covered():
    covered = {" ".join(argv[:2]) if argv[0] == "scenarios" else argv[0] for argv, *_ in CASES.values()}
    assert _json_commands() <= covered, sorted(_json_commands() - covered)


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--seed", "-1", "--out", "OUT"],
        ["materialize", "FILE", "--dp-size", "0"],
        ["plan", "--bogus", "FILE"],
        ["serve", "--json", "--port", "70000"],  # serve takes no --json: Typer's own message, as before
    ],
    ids=["run --seed", "materialize --dp-size", "plan unknown option", "serve --port"],
)
def test_without_json_the_usage_error_stays_for_a_person(argv: list[str], tmp_path: Path):
    result = runner.invoke(app, _argv(argv, tmp_path))
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert "Usage: compactsim" in result.stderr
    assert "Invalid value for '--" in result.stderr or "No such option" in result.stderr
    assert '"error_code"' not in result.stderr


def test_json_after_double_dash_is_an_argument_not_the_flag(tmp_path: Path):
    result = runner.invoke(app, ["materialize", "--dp-size", "0", "--", "--json"])
    assert result.exit_code == 2
    assert result.stdout == "" and "Invalid value for '--dp-size'" in result.stderr


@pytest.mark.parametrize("argv", [["run", "--seed", "--json"], ["materialize", "FILE", "--dp-size", "--json"],
                                  ["run", "--out", "--json", "--seed", "x"]],
                         ids=["run --seed --json", "materialize --dp-size --json", "run --out --json"])
def test_json_taken_as_an_options_value_is_not_the_flag(argv: list[str], tmp_path: Path):
    """Click hands the word after an option that takes a value to that option, `--json` included."""
    result = runner.invoke(app, _argv(argv, tmp_path))
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and "Usage: compactsim" in result.stderr
    assert "Invalid value for '--" in result.stderr and '"error_code"' not in result.stderr


def test_a_json_run_of_a_real_process_prints_only_json(tmp_path: Path):
    """Through the installed entry point (not CliRunner): stdout is one JSON object, stderr empty, exit 2."""
    import subprocess
    import sys

    code = "import sys; from compactsim.harness.cli import app; sys.argv[0] = 'compactsim'; app()"
    proc = subprocess.run([sys.executable, "-c", code, "run", "--json", "--seed", "-1", "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == ""
    assert json.loads(proc.stdout)["option"] == "--seed"


def _path_parameters() -> list[tuple[tuple[str, ...], str, bool]]:
    """(command path, parameter name, is an option) of every parameter Typer converts to a `Path`."""
    from compactsim.harness.commands.usage_errors import _takes_paths

    found = []

    def walk(command, path: tuple[str, ...]):
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, (*path, name))
        for param in command.params:
            if _takes_paths(param):
                long = [o for o in (getattr(param, "opts", None) or ()) if o.startswith("--")]
                found.append((path, long[0] if param.param_type_name == "option" else param.name,
                              param.param_type_name == "option"))

    walk(typer.main.get_command(app), ())
    return found


def test_commands_take_paths():  # the parametrisation below is not empty: `Path` is still how they are declared
    names = {(" ".join(p), n) for p, n, _ in _path_parameters()}
    assert {("run", "--out"), ("plan", "files"), ("verify", "rows_dump"), ("run", "--junit-xml")} <= names


@pytest.mark.parametrize("command,name,is_option", _path_parameters(),
                         ids=[f"{' '.join(p)} {n}" for p, n, _ in _path_parameters()])
def test_an_empty_path_is_refused_not_read_as_the_current_folder(command, name, is_option, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch):
    """`Path('')` is `Path('.')`: ``--out ''`` (an unset shell variable) must not write into the working folder."""
    monkeypatch.chdir(tmp_path)
    argv = [*command, name, ""] if is_option else [*command, ""]
    result = runner.invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert "an empty path" in result.stderr, result.output
    assert list(tmp_path.iterdir()) == []  # nothing written where '.' points


def test_an_empty_out_under_json_names_the_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["run", "no-compaction", "--json", "--out="])
    assert result.exit_code == 2, result.output
    error = json.loads(result.stdout)
    assert (error["error_code"], error["option"], error["value"]) == ("invalid_argument", "--out", "")
    assert "an empty path" in error["message"]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv", [
    ["run", "no-compaction", "--seed", "-1"],
    ["run", "--steps", "abc"],
    ["run", "--bogus"],
    ["run", "--json", "--parallel", "0"],
    ["verify", "G", "R", "--bogus"],
    ["verify", "G"],  # a missing argument
], ids=["run --seed -1", "run --steps abc", "run unknown option", "run --json --parallel 0", "verify unknown option",
        "verify missing rows dump"])
def test_a_refused_command_line_still_deletes_earlier_reports(argv: list[str], tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch):
    """docs/ci.md: on exit 2 no JUnit or Markdown file is left from an earlier run, whatever refused the run;
    Typer's own checks come before the command body that deletes them."""
    monkeypatch.chdir(tmp_path)
    for name in ("old.xml", "old.md"):
        (tmp_path / name).write_text("an earlier run's verdict")
    result = runner.invoke(app, [*argv, "--junit-xml", "old.xml", "--markdown", "old.md"])
    assert result.exit_code == 2, result.output
    assert not (tmp_path / "old.xml").exists() and not (tmp_path / "old.md").exists()


def test_an_option_missing_its_value_at_the_end_still_deletes_earlier_reports(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "old.xml").write_text("an earlier run's verdict")
    result = runner.invoke(app, ["run", "--junit-xml", "old.xml", "--seed"])
    assert result.exit_code == 2 and "requires an argument" in result.stderr, result.output
    assert not (tmp_path / "old.xml").exists()


def test_a_refused_command_line_never_deletes_one_of_its_inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text("scenarios: []\n")
    from compactsim.harness.commands.run import DEFAULT_OUT

    (tmp_path / DEFAULT_OUT).mkdir()
    (tmp_path / DEFAULT_OUT / "summary.json").write_text("{}")
    result = runner.invoke(app, ["run", "s.yaml", "--seed", "-1", "--junit-xml", "s.yaml",
                                 "--markdown", str(DEFAULT_OUT / "summary.json")])
    assert result.exit_code == 2, result.output
    assert (tmp_path / "s.yaml").read_text() == "scenarios: []\n"  # named on the command line: an input
    assert (tmp_path / DEFAULT_OUT / "summary.json").read_text() == "{}"  # inside the default --out folder
