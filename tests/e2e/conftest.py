"""One run of the default suite per test session, shared by every end-to-end test that reads it
(and by both pytest-xdist workers)."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
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


def _run_suite(folder: Path) -> SuiteRun:
    out = folder / "run"
    result = CliRunner().invoke(app, ["run", "--out", str(out)])
    summary_file = out / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.is_file() else {}
    return SuiteRun(result.exit_code, result.output, out, summary)


@contextmanager
def _exclusive(lock: Path) -> Iterator[None]:
    with lock.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def default_suite(tmp_path_factory: pytest.TempPathFactory) -> SuiteRun:
    """The default suite, run once per test session (its most expensive work).

    Under pytest-xdist (`make test`), the first worker that needs it runs it under a file lock in
    the session's shared temporary folder and records the exit code and output there; another
    worker waits for the lock and reads the same run instead of repeating it.
    """
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return _run_suite(tmp_path_factory.mktemp("default-suite"))
    shared = tmp_path_factory.getbasetemp().parent / "default-suite"  # one folder for all workers
    shared.mkdir(exist_ok=True)
    done = shared / "result.json"
    with _exclusive(shared.with_suffix(".lock")):
        if not done.is_file():
            run = _run_suite(shared)
            done.write_text(json.dumps({"exit_code": run.exit_code, "output": run.output}), encoding="utf-8")
            return run
    recorded = json.loads(done.read_text(encoding="utf-8"))
    out = shared / "run"
    summary_file = out / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.is_file() else {}
    return SuiteRun(recorded["exit_code"], recorded["output"], out, summary)
