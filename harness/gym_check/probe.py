"""Talk to the checker running inside a revision's venv: one JSON request per line, one answer per line."""

from __future__ import annotations

import json
import os
import select
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

from compactsim.harness.gym_check.errors import GymSetupError

CHECKER = Path(__file__).with_name("checker.py")
#: Seconds one request may take; live runs of a few scripted rollouts take about a second.
DEFAULT_TIMEOUT_S = 300.0


class CheckerProcess:
    """A running checker; use as a context manager so the process always ends."""

    def __init__(self, python: Path, *, source_paths: tuple[Path, ...] = (), timeout_s: float = DEFAULT_TIMEOUT_S):
        self.python = python
        self.source_paths = source_paths
        self.timeout_s = timeout_s
        self._proc: subprocess.Popen[str] | None = None
        self._stderr = tempfile.TemporaryFile(mode="w+", encoding="utf-8")
        self._next_id = 0

    def __enter__(self) -> CheckerProcess:
        cmd = [str(self.python), "-I", str(CHECKER)]
        for path in self.source_paths:
            cmd += ["--path", str(path)]
        env = {k: v for k, v in os.environ.items() if k in {"PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT"}}
        env["PYTHONHASHSEED"] = "0"
        try:
            self._proc = subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True, env=env,
                cwd=tempfile.gettempdir(),
            )
        except OSError as exc:
            raise GymSetupError("checker", f"cannot start {self.python}: {exc}") from None
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        proc = self._proc
        if proc is None:
            return
        self._proc = None
        try:
            if proc.poll() is None and proc.stdin is not None:
                proc.stdin.write(json.dumps({"op": "shutdown"}) + "\n")
                proc.stdin.flush()
                proc.stdin.close()
            proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired, ValueError):
            proc.kill()
            proc.wait()
        self._stderr.close()

    def stderr_tail(self, lines: int = 8) -> str:
        try:
            self._stderr.seek(0)
            text = self._stderr.read()
        except (OSError, ValueError):
            return ""
        return " | ".join(text.strip().splitlines()[-lines:])

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send one request and return its `result`; a failed op raises `GymSetupError("checker")`."""
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdout is None:
            raise GymSetupError("checker", "the checker is not running")
        self._next_id += 1
        try:
            proc.stdin.write(json.dumps({"op": op, "id": self._next_id, **fields}) + "\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise GymSetupError("checker", f"the checker exited early (code {proc.poll()}): {self.stderr_tail()}") from None
        ready, _, _ = select.select([proc.stdout], [], [], self.timeout_s)
        if not ready:
            proc.kill()
            raise GymSetupError("checker", f"{op} took longer than {self.timeout_s:.0f} s")
        line = proc.stdout.readline()
        if not line:
            raise GymSetupError("checker", f"the checker exited during {op} (code {proc.wait()}): {self.stderr_tail()}")
        answer = json.loads(line)
        if not answer.get("ok"):
            raise GymSetupError("checker", f"{op} failed inside the revision: {answer.get('error')}")
        return answer["result"]


__all__ = ["CHECKER", "DEFAULT_TIMEOUT_S", "CheckerProcess"]
