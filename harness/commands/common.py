"""Shared CLI plumbing: exit codes, reading result files, printing JSON and errors."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from enum import IntEnum
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape as rich_escape

from compactsim.harness.core.errors import CompactsimError, ConfigError, ContractError
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
#: Worker threads, processes or Ray actors of one `compactsim rollout` (those beyond its rollouts sit idle).
MAX_WORKERS = 1024


def use_cwd_imports() -> None:
    """Let `--backend tests.quality.x:Backend` import from the current directory (as `python -m` would); every
    command with a `--backend` option calls it, so one spec loads the same module under each."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)


def _console(stderr: bool = False) -> Console:
    """Wide when piped (logs, CI), terminal width otherwise; no emoji codes, so a `:a:` in a name prints as written."""
    probe = Console(stderr=stderr)
    return Console(stderr=stderr, highlight=False, emoji=False, width=None if probe.is_terminal else 200)


console = _console()
err_console = _console(stderr=True)


def load_results(path: Path) -> list[Any]:
    """A file holding one result object, a JSON list of results, or JSON lines (limits: `compactsim.harness.core.json_input`)."""
    return load_json_documents(path, what="Gym result file")


def located_results(files: list[Path]) -> Iterator[tuple[Any, str]]:
    """Each result of `files` in order, with its place ("FILE: result k of n") for `located`."""
    for path in files:
        results = load_results(path)
        for k, result in enumerate(results):
            yield result, f"{path}: result {k + 1} of {len(results)}"


def located(exc: ContractError, where: str) -> ContractError:
    """`exc` with `where` in its detail when it names no rollout, so a bad line of a long JSONL file (a list, no
    `response`) can be found; an error naming its rollout already says where."""
    if exc.rollout_id is not None:
        return exc
    return ContractError(exc.code, turn_id=exc.turn_id, detail=f"{where}: {exc.detail}")


def print_json(value: Any) -> None:
    """Machine output goes to stdout unstyled."""
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=False) + "\n")
    sys.stdout.flush()


def describe_range(minimum: int | float | None, maximum: int | float | None) -> str | None:
    """A numeric option's bounds in `--help`'s notation (``1<=x<=16``, ``x>=1``), None for none."""
    if minimum is None and maximum is None:
        return None
    if minimum is None:
        return f"x<={maximum}"
    if maximum is None:
        return f"x>={minimum}"
    return f"{minimum}<=x<={maximum}"


class OptionError(ConfigError):
    """A command-line option or argument the parser refused: outside its range, not a number, unknown, missing.

    Only `--json` runs turn Typer's usage errors into this (`compactsim.harness.cli`); without
    `--json` Typer prints its own usage message. Its JSON keeps the keys of a malformed input file's
    (`InputError.to_json`: `file`, `line`, `column` are null, `field` is the option) and adds
    `option`, `value` (as typed; a list for a repeated option; null when none was given), `min`,
    `max` and `allowed` (the range as `--help` shows it, e.g. ``0<=x<=9223372036854775807``).
    """

    def __init__(self, message: str, *, option: str | None = None, value: Any = None,
                 minimum: int | float | None = None, maximum: int | float | None = None) -> None:
        super().__init__("invalid_argument", message)
        self.option = option
        self.value = value
        self.minimum = minimum
        self.maximum = maximum

    @property
    def allowed(self) -> str | None:
        """The range in `--help`'s notation, None for an option without bounds."""
        return describe_range(self.minimum, self.maximum)

    def __reduce__(self):  # type: ignore[override]
        return (_rebuild_option_error, (self.detail, self.option, self.value, self.minimum, self.maximum))

    def to_json(self) -> dict[str, Any]:
        return {"error_code": self.code, "file": None, "line": None, "column": None, "field": self.option,
                "option": self.option, "value": self.value, "min": self.minimum, "max": self.maximum,
                "allowed": self.allowed, "message": self.detail}


def _rebuild_option_error(message: str, option: str | None, value: Any, minimum: int | float | None,
                          maximum: int | float | None) -> OptionError:
    return OptionError(message, option=option, value=value, minimum=minimum, maximum=maximum)


def report_error(exc: CompactsimError, *, as_json: bool) -> ExitCode:
    """Print a compactsim error for a person (stderr, red) or a machine (stdout JSON)."""
    if as_json and isinstance(exc, (ContractError, InputError, OptionError)):
        print_json(exc.to_json())
    elif as_json:
        print_json({"error_code": getattr(exc, "code", "error"), "message": str(exc)})
    else:
        err_console.print(f"[red]error[/red]: {rich_escape(str(exc))}", markup=True, soft_wrap=True)
    return ExitCode.ERROR
