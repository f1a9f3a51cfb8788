"""Each command's exit codes, shown at the end of its `--help` (README: "Exit codes").

One table, so `--help` and the README cannot drift command by command; `add_exit_codes(app)` appends
each command's line to its epilog after every command is registered.
"""

from __future__ import annotations

import typer

_SIGNALS = "130 / 143 after SIGINT / SIGTERM"

#: command path (as typed) -> what its exit codes mean
EXIT_CODES: dict[str, str] = {
    "run": "0 every scenario met its verdict; 1 findings; 2 bad input, usage or setup (a scenario edit that cannot "
           f"apply to its rollout included, after the outputs are written); {_SIGNALS} (run-state.json: interrupted)",
    "replay": "0 the saved run passes, or the payload plans and materializes; 1 a saved failure's findings; "
              "2 bad input or a contract error in the payload",
    "shrink": "0 the smaller failing entry is written; 2 bad input, or no failure to shrink",
    "plan": "0 every rollout planned; 2 bad input or a contract error (its code, rollout and turn)",
    "materialize": "0 the batch is built; 2 bad input or a contract error (its code, rollout and turn)",
    "serve": "0 stopped; 2 bad settings or a port that cannot be bound",
    "rollout": f"0 the rollouts are written; 2 bad input or setup; {_SIGNALS}",
    "train": f"0 every step trained; 2 bad input, setup, or a step that failed (training_failed); {_SIGNALS}",
    "gym-check": "0 compatible; 2 setup failure or bad input; 3 drift the planner cannot accept, or no contract",
    "export": "0 written (--check: the goldens are current); 1 --check: stale or extra files; 2 bad input",
    "verify": "0 the dump matches the goldens; 1 findings; 2 malformed input (the dump, the metrics, the goldens)",
    "schema": "0 printed; 2 unknown schema name",
    "list": "0 listed; 2 unknown tag",
    "show": "0 shown; 2 unknown scenario",
    "scenarios list": "0 listed; 2 unknown tag",
    "scenarios show": "0 shown; 2 unknown scenario",
}


def add_exit_codes(app: typer.Typer, prefix: str = "") -> None:
    """Append ``Exit codes: ...`` to the epilog of every command of `app` (and of its sub-apps) in `EXIT_CODES`."""
    for info in app.registered_commands:
        name = f"{prefix}{info.name or ''}"
        if name in EXIT_CODES:
            line = f"Exit codes: {EXIT_CODES[name]}."
            info.epilog = f"{info.epilog}\n\n{line}" if info.epilog else line
    for group in app.registered_groups:
        if group.typer_instance is not None:
            add_exit_codes(group.typer_instance, f"{prefix}{group.name} ")


__all__ = ["EXIT_CODES", "add_exit_codes"]
