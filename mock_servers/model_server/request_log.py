"""An append-only log of every request the mock model server answered, with request/response digests."""

from __future__ import annotations

import errno
import json
import logging
import os
import threading
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from compactsim.harness.core.errors import ConfigError

_log = logging.getLogger("compactsim.mock_servers")
#: the system calls that append to the file and cut a torn line off it (seams for tests that simulate a failing disk)
_write = os.write
_truncate = os.ftruncate


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One answered request. `seq` is arrival order (a log, not an artifact: never digested).

    `rollout_id`, `turn` and `attempt` are the server's call key for a generation request (from
    metadata hints or derived from the request, see `engine.CallTracker`); `key_source` says which.
    `file_error` is set (to the OS reason) when the entry could not be appended to
    ``request_log_path``: the entry is then in memory only.
    """

    seq: int
    endpoint: str
    status: int
    request_digest: str
    response_digest: str
    policy_version: int
    rollout_id: str | None = None
    turn: int | None = None
    faults: tuple[str, ...] = ()
    prompt_tokens: int | None = None
    generated_tokens: int | None = None
    detail: str | None = None
    attempt: int | None = None
    key_source: str | None = None
    file_error: str | None = None


class RequestLog:
    """Thread-safe in-memory log (capped), optionally mirrored to a JSON-lines file.

    The file is opened for appending once here, so a path that cannot be written (a missing
    folder, a directory, ``/proc``) is a `ConfigError` naming ``request_log_path`` when the server
    is built, not a 500 on every request.

    An append that fails later (disk full, the folder removed, permissions changed) does not fail
    the request: the answer was already computed, and the server's state (the call tracker) has
    counted the call, so refusing it (a 500 or a 507) would throw a good result away and make the
    client's retry a *different* attempt, with different scripted faults and answers. The log file
    is a mirror for people and tools; the run's results never depend on it. So the request is
    answered as usual, the entry stays in memory with `file_error` set to the OS reason, and the
    failure is made visible, never silent: `file_status()` (served in ``/health`` and
    ``/request_log``) says the file is incomplete and why, and the ``compactsim.mock_servers``
    logger warns when appends start failing and when they resume. A later append that succeeds
    resumes the mirror; the file then skips the lost `seq` numbers (consecutive otherwise), so
    a reader can see exactly which entries it lacks (a file removed meanwhile is not created
    again: each append fails, ENOENT, until it is put back). A partly written line is cut off again, so
    the file never holds a torn entry glued to the next one.
    """

    def __init__(self, *, max_entries: int, path: str | None = None) -> None:
        self._entries: list[LogEntry] = []
        self._lock = threading.Lock()
        self._max = max_entries
        self._path = Path(path) if path else None
        self._seq = 0
        self._unwritten = 0
        self._last_error: str | None = None
        self._failing = False
        self._torn = False  # the file ends in a partial line that could not be cut off
        if self._path is not None:
            try:
                if self._path.is_fifo() or self._path.is_socket():  # `open` would block on a FIFO until a reader came
                    raise ValueError("a named pipe or socket, not a file (a device such as /dev/stdout is fine)")
                with self._path.open("a", encoding="utf-8"):
                    pass
            except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                raise ConfigError("invalid_config", f"request_log_path {path!r}: cannot append to it: {reason}") from None

    def record(self, **fields: object) -> LogEntry:
        with self._lock:
            entry = LogEntry(seq=self._seq, **fields)  # type: ignore[arg-type]
            self._seq += 1
            if self._path is not None:
                entry = self._mirror(entry)
            if len(self._entries) < self._max:
                self._entries.append(entry)
            return entry

    def _mirror(self, entry: LogEntry) -> LogEntry:
        """Append `entry` to the file; on failure, `entry` with `file_error` set (the lock is held)."""
        line = (json.dumps(asdict(entry), sort_keys=True) + "\n").encode("utf-8")
        try:
            self._append(b"\n" + line if self._torn else line)
        except OSError as exc:
            reason = os_reason(exc)
            self._unwritten += 1
            self._last_error = reason
            if not self._failing:
                _log.warning("request_log_path %r: cannot append entry seq %d: %s; entries stay in memory "
                             "(GET /request_log) and the file is incomplete", str(self._path), entry.seq, reason)
            self._failing = True
            return replace(entry, file_error=reason)
        if self._failing:
            _log.warning("request_log_path %r: appending again from seq %d; %d entries are missing from the file",
                         str(self._path), entry.seq, self._unwritten)
        self._failing = False
        self._torn = False
        return entry

    def _append(self, data: bytes) -> None:
        """One line onto the file, opened per entry and never created again: a file removed meanwhile is an
        ENOENT failure, not a handle nobody can read, nor a new file that looks complete but starts mid-run."""
        assert self._path is not None
        fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        try:
            start = os.fstat(fd).st_size
            done = 0
            try:
                while done < len(data):
                    done += _write(fd, data[done:])
            except OSError:
                if done:
                    self._cut(fd, start)
                raise
        finally:
            os.close(fd)

    def _cut(self, fd: int, size: int) -> None:
        """Remove a partly written line (best effort; if that fails too, the next line starts on a line of its own)."""
        try:
            _truncate(fd, size)
        except OSError:
            self._torn = True

    def file_status(self) -> dict[str, Any] | None:
        """The file mirror's state (None without ``request_log_path``): ``complete`` is False once any
        entry failed to be appended, for good; ``last_error`` is the latest OS reason."""
        if self._path is None:
            return None
        with self._lock:
            return {"path": str(self._path), "complete": self._unwritten == 0, "unwritten_entries": self._unwritten,
                    "last_error": self._last_error}

    def entries(self) -> list[LogEntry]:
        with self._lock:
            return list(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def os_reason(exc: OSError) -> str:
    """``No space left on device (ENOSPC)``: the OS message and its errno name."""
    name = errno.errorcode.get(exc.errno or 0)
    text = exc.strerror or str(exc)
    return f"{text} ({name})" if name else text


__all__ = ["LogEntry", "RequestLog", "os_reason"]
