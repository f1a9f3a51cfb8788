"""An append-only log of every request the mock model server answered, with request/response digests."""

from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from compactsim.harness.core.errors import ConfigError


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One answered request. `seq` is arrival order (a log, not an artifact: never digested).

    `rollout_id`, `turn` and `attempt` are the server's call key for a generation request (from
    metadata hints or derived from the request, see `engine.CallTracker`); `key_source` says which.
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


class RequestLog:
    """Thread-safe in-memory log (capped), optionally mirrored to a JSON-lines file.

    The file is opened for appending once here, so a path that cannot be written (a missing
    folder, a directory, ``/proc``) is a `ConfigError` naming ``request_log_path`` when the server
    is built, not a 500 on every request.
    """

    def __init__(self, *, max_entries: int, path: str | None = None) -> None:
        self._entries: list[LogEntry] = []
        self._lock = threading.Lock()
        self._max = max_entries
        self._path = Path(path) if path else None
        self._seq = 0
        if self._path is not None:
            try:
                with self._path.open("a", encoding="utf-8"):
                    pass
            except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                raise ConfigError("invalid_config", f"request_log_path {path!r}: cannot append to it: {reason}") from None

    def record(self, **fields: object) -> LogEntry:
        with self._lock:
            entry = LogEntry(seq=self._seq, **fields)  # type: ignore[arg-type]
            self._seq += 1
            if len(self._entries) < self._max:
                self._entries.append(entry)
            if self._path is not None:
                with self._path.open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps(asdict(entry), sort_keys=True) + "\n")
            return entry

    def entries(self) -> list[LogEntry]:
        with self._lock:
            return list(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


__all__ = ["LogEntry", "RequestLog"]
