"""One run of the default suite per test session, shared by every end-to-end test that reads it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from compactsim.harness.cli import app


@dataclass(frozen=True)
class SuiteRun:
    """`compactsim run` over the whole catalogue: exit code, output, folder and parsed summary."""

    exit_code: int
    output: str
    out: Path
    summary: dict[str, Any]

    def scenario(self, name: str) -> dict[str, Any]:
        return next(s for s in self.summary["scenarios"] if s["name"] == name)


@pytest.fixture(scope="session")
def default_suite(tmp_path_factory: pytest.TempPathFactory) -> SuiteRun:
    """The default suite, run once (the most expensive work of the test session).

    Every test reading it lives in `test_catalogue_scenarios.py`, so under `make test`'s
    `--dist=loadfile` one pytest-xdist worker runs it and the other never does.
    """
    out = tmp_path_factory.mktemp("default-suite") / "run"
    result = CliRunner().invoke(app, ["run", "--out", str(out)])
    summary_file = out / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.is_file() else {}
    return SuiteRun(result.exit_code, result.output, out, summary)
