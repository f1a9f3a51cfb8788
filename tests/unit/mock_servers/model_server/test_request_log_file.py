"""The request log's file mirror failing at request time (disk full, file removed): answered, kept, and shown.

Before, the OSError escaped `RequestLog.record` and the client got a 500 for a request the server
had already answered (and counted as an attempt). Now the request is answered as usual, the entry
stays in memory with ``file_error``, and `/health` and `/request_log` say the file is incomplete
and why; a later append resumes the mirror, which then skips only the lost ``seq`` numbers.
"""

from __future__ import annotations

import errno
import json
import logging
import os
from pathlib import Path

import pytest

from compactsim.mock_servers.model_server import ServerSettings, request_log
from compactsim.mock_servers.model_server.request_log import RequestLog
from tests.unit.mock_servers.model_server.server_builders import SCRIPT, chat_body, client_for, meta

ENOSPC = "No space left on device (ENOSPC)"
WARN_FAILING = ("request_log_path {path!r}: cannot append entry seq {seq}: {reason}; entries stay in memory "
                "(GET /request_log) and the file is incomplete")


def _record(log: RequestLog, n: int = 1) -> None:
    for _ in range(n):
        log.record(endpoint="chat", status=200, request_digest="r", response_digest="s", policy_version=0)


def _lines(path: Path) -> list[str]:
    return path.read_text().split("\n")


class _FullDisk:
    """An `os.write` stand-in that fails the entries whose ``seq`` is in `fail` with ENOSPC: at once, or after
    writing their first `partial` bytes (the call for the rest of the line then fails)."""

    def __init__(self, fail: set[int], *, partial: int = 0) -> None:
        self.fail = fail
        self.partial = partial

    def __call__(self, fd: int, data: bytes) -> int:
        try:
            seq = json.loads(bytes(data))["seq"]
        except ValueError:  # the rest of a line cut short: the disk is still full
            seq = None
        if seq is not None and seq not in self.fail:
            return os.write(fd, data)
        if seq is not None and self.partial:
            return os.write(fd, data[: self.partial])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="/dev/full (ENOSPC on every write) is Linux's")
def test_a_full_disk_answers_the_request_normally_and_says_the_file_is_incomplete(caplog):
    body = chat_body(metadata=meta("r1", 1))
    with client_for(ServerSettings(seed=7, script=SCRIPT)) as plain:
        expected = plain.post("/v1/chat/completions", json=body)
    with caplog.at_level(logging.WARNING, "compactsim.mock_servers"), \
            client_for(ServerSettings(seed=7, script=SCRIPT, request_log_path="/dev/full")) as c:
        first = c.post("/v1/chat/completions", json=body)
        second = c.post("/v1/chat/completions", json={"messages": 3})
        health = c.get("/health").json()
        log = c.get("/request_log").json()
    status = {"path": "/dev/full", "complete": False, "unwritten_entries": 2, "last_error": ENOSPC}
    assert (first.status_code, first.content, second.status_code) == (200, expected.content, 422)
    assert health == {"status": "ok", "mode": "scripted", "policy_version": 0, "request_log_file": status}
    assert log["file"] == status
    assert [(e["seq"], e["status"], e["file_error"]) for e in log["entries"]] == [(0, 200, ENOSPC), (1, 422, ENOSPC)]
    # warned once when appends started failing, not once per entry
    assert [r.getMessage() for r in caplog.records] == [WARN_FAILING.format(path="/dev/full", seq=0, reason=ENOSPC)]


def test_appends_resume_after_a_failure_and_the_file_skips_only_the_lost_entry(tmp_path, monkeypatch, caplog):
    path = tmp_path / "log.jsonl"
    log = RequestLog(max_entries=10, path=str(path))
    monkeypatch.setattr(request_log, "_write", _FullDisk({1}))
    with caplog.at_level(logging.WARNING, "compactsim.mock_servers"):
        _record(log, 3)
    assert [json.loads(x)["seq"] for x in path.read_text().splitlines()] == [0, 2]
    assert [e.file_error for e in log.entries()] == [None, ENOSPC, None]
    assert log.file_status() == {"path": str(path), "complete": False, "unwritten_entries": 1, "last_error": ENOSPC}
    assert [r.getMessage() for r in caplog.records] == [
        WARN_FAILING.format(path=str(path), seq=1, reason=ENOSPC),
        f"request_log_path {str(path)!r}: appending again from seq 2; 1 entries are missing from the file",
    ]


def test_a_partly_written_line_is_cut_off_so_the_file_holds_whole_entries_only(tmp_path, monkeypatch):
    path = tmp_path / "log.jsonl"
    log = RequestLog(max_entries=10, path=str(path))
    monkeypatch.setattr(request_log, "_write", _FullDisk({1}, partial=10))  # entry 1: 10 bytes, then ENOSPC
    _record(log, 3)
    lines = _lines(path)
    assert [json.loads(x)["seq"] for x in lines[:-1]] == [0, 2] and lines[-1] == ""


def test_a_torn_line_that_cannot_be_cut_off_leaves_the_next_entry_on_its_own_line(tmp_path, monkeypatch):
    path = tmp_path / "log.jsonl"
    log = RequestLog(max_entries=10, path=str(path))

    def refuse(fd: int, size: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(request_log, "_write", _FullDisk({1}, partial=10))
    monkeypatch.setattr(request_log, "_truncate", refuse)
    _record(log, 3)
    lines = _lines(path)
    assert (json.loads(lines[0])["seq"], lines[1], json.loads(lines[2])["seq"], lines[3]) == (0, '{"attempt"', 2, "")


def test_a_removed_log_file_is_reported_and_not_created_again(tmp_path):
    path = tmp_path / "log.jsonl"
    with client_for(ServerSettings(seed=7, script=SCRIPT, request_log_path=str(path))) as c:
        path.unlink()
        r = c.post("/v1/chat/completions", json=chat_body())
        entries = c.get("/request_log").json()["entries"]
        health = c.get("/health").json()["request_log_file"]
    reason = "No such file or directory (ENOENT)"
    assert (r.status_code, [e["file_error"] for e in entries], path.exists()) == (200, [reason], False)
    assert health == {"path": str(path), "complete": False, "unwritten_entries": 1, "last_error": reason}


def test_a_healthy_mirror_reports_complete_and_its_lines_are_the_entries(tmp_path):
    path = tmp_path / "log.jsonl"
    with client_for(ServerSettings(seed=7, script=SCRIPT, request_log_path=str(path))) as c:
        c.post("/v1/chat/completions", json=chat_body())
        log = c.get("/request_log").json()
    assert log["file"] == {"path": str(path), "complete": True, "unwritten_entries": 0, "last_error": None}
    assert [json.loads(x) for x in path.read_text().splitlines()] == log["entries"]


def test_a_named_pipe_is_refused_at_start_instead_of_blocking_it(tmp_path):
    """`open(fifo, "a")` waits for a reader: `serve` hung before printing its address (fuzzing round 4)."""
    from compactsim.harness.core.errors import ConfigError

    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="a named pipe or socket, not a file"):
        RequestLog(max_entries=10, path=str(fifo))


def test_an_empty_request_log_path_is_refused_naming_the_field():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="request_log_path\n  Value error, an empty path"):
        ServerSettings(request_log_path="")
