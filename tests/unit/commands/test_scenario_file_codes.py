"""A scenario file's problems carry the catalogue's code, `invalid_config`, whichever command reads the file.

The commands check a file before loading it (`check_scenario_file`); that check used to report problems found
while reading (a duplicate key, bytes that are not UTF-8, an empty file) as `invalid_argument`, while
`load_file` reported the same file as `invalid_config` (fuzzing round 4).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from compactsim.harness.cli import app
from compactsim.scenarios.catalogue import ScenarioFileError, load_file

FILES = {
    "duplicate key": b"scenarios:\n  - name: a1\n    purpose: p\n    steps: 1\n    steps: 2\n",
    "not UTF-8": b"scenarios:\n  - name: a1\n    purpose: \xff\n",
    "empty": b"",
    "a tab": b"scenarios:\n\t- name: a1\n",
    "an unsafe tag": b"scenarios: !!python/object:os.system {}\n",
}


@pytest.mark.parametrize("command", ["run", "export", "shrink"])
@pytest.mark.parametrize("case", sorted(FILES))
def test_the_cli_reports_a_scenario_file_problem_as_invalid_config(case: str, command: str, tmp_path: Path):
    path = tmp_path / "s.yaml"
    path.write_bytes(FILES[case])
    result = CliRunner().invoke(app, [command, str(path), "--out", str(tmp_path / "o"), "--json"])
    assert result.exit_code == 2, result.output
    error = json.loads(result.stdout)
    assert (error["error_code"], error["file"]) == ("invalid_config", str(path)), error
    if case != "empty":  # the library reads the same file with the same code (an empty one holds no scenarios)
        with pytest.raises(ScenarioFileError) as info:
            load_file(path)
        assert info.value.code == "invalid_config" and info.value.line == error["line"]
