"""Shared CLI plumbing: exit codes, reading result files, printing JSON and errors."""

from __future__ import annotations

import json
import sys
from enum import IntEnum
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape as rich_escape

from compactsim.harness.core.errors import CompactsimError, ContractError
from compactsim.harness.core.json_input import InputError, load_json_documents


class ExitCode(IntEnum):
    """Every compactsim command exits through these codes."""

    OK = 0
    #: scenarios or audits found problems (verify/run findings)
    FINDINGS = 1
    #: bad input: a contract error in the evidence, a usage error, or a setup failure
    ERROR = 2
    #: a Gym revision drifts in ways the planner cannot accept
    DRIFT = 3


def _console(stderr: bool = False) -> Console:
    """Wide when piped (logs, CI), terminal width otherwise."""
    probe = Console(stderr=stderr)
    return Console(stderr=stderr, highlight=False, width=None if probe.is_terminal else 200)


console = _console()
err_console = _console(stderr=True)


def load_results(path: Path) -> list[Any]:
    """A file holding one result object, a JSON list of results, or JSON lines (limits: `compactsim.harness.core.json_input`)."""
    return load_json_documents(path, what="Gym result file")


def print_json(value: Any) -> None:
    """Machine output goes to stdout unstyled."""
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=False) + "\n")
    sys.stdout.flush()


def report_error(exc: CompactsimError, *, as_json: bool) -> ExitCode:
    """Print a compactsim error for a person (stderr, red) or a machine (stdout JSON)."""
    if as_json and isinstance(exc, (ContractError, InputError)):
        print_json(exc.to_json())
    elif as_json:
        print_json({"error_code": getattr(exc, "code", "error"), "message": str(exc)})
    else:
        err_console.print(f"[red]error[/red]: {rich_escape(str(exc))}", markup=True, soft_wrap=True)
    return ExitCode.ERROR
