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


#: Bounds of the size and seed options, so Typer refuses what cannot run (exit 2, the option named)
#: instead of a traceback, a finding, hours of work or gigabytes of padding. The scenario schema
#: (`compactsim.scenarios.model`) bounds the same settings with the same numbers; not imported from
#: there so `compactsim --help` stays fast (tests/unit/commands/test_input_hardening.py keeps them equal).
#: Seeds are non-negative int64s (`compactsim.harness.core.seeds.check_seed`).
MAX_SEED = 2**63 - 1
#: Model calls per rollout (`scenarios.model.MAX_TURNS`).
MAX_TURNS = 16
#: Optimizer steps of one training run (`scenarios.model.MAX_STEPS`).
MAX_STEPS = 100
#: Screenshots per tool result (`scenarios.model.TurnsGenerator.images_per_observation`).
MAX_IMAGES_PER_OBSERVATION = 4
#: Rollouts of one `compactsim rollout` group.
MAX_ROLLOUTS = 64
#: Batch geometry: simulated data-parallel ranks, rows per micro-batch and the sequence-length
#: multiple (`scenarios.model.MAX_DP_SIZE`, ...). Padding grows with their product: at the caps a
#: batch has at most 128 × 32 rows, each padded to a multiple of 1024 tokens.
MAX_DP_SIZE = 128
MAX_MICRO_BATCH_SIZE = 32
MAX_SEQ_DIVISIBLE_BY = 1024
#: TCP ports (0: the system picks a free one).
MAX_PORT = 65535


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
