"""A client's whole answer is due within its deadline: a server that trickles its body cannot hold a call."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import httpx
import pytest

from compactsim.agents.collect.rollouts import HttpServers
from compactsim.agents.rollout.loop import CallFailed, RetryPolicy, post_json
from compactsim.harness.core.http_deadline import DEADLINE_READ_TIMEOUTS, DeadlineTransport, deadline_client

pytestmark = pytest.mark.timeout(60)

BODY = b'{"ok": true}'


@contextmanager
def loopback_server(answer: Callable[[socket.socket, threading.Event], None]) -> Iterator[str]:
    """A loopback HTTP server running `answer(connection, stop)` on a thread per connection, after reading the request."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)
                answer(conn, stop)
            except OSError:
                pass

    def accept() -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        sock.close()


def raw_server(trickle_s: float | None) -> AbstractContextManager[str]:
    """Every request answered with `BODY`: at once, or its headers at once and then one body byte per `trickle_s` forever."""

    def answer(conn: socket.socket, stop: threading.Event) -> None:
        if trickle_s is None:
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                         b"connection: close\r\n\r\n%s" % (len(BODY), BODY))
            return
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000000\r\n\r\n")
        while not stop.is_set():
            conn.sendall(b" ")
            time.sleep(trickle_s)

    return loopback_server(answer)


def trickled_head_server(byte_every_s: float) -> AbstractContextManager[str]:
    """Every request answered with its status line and headers one byte per `byte_every_s`, never finishing them."""

    def answer(conn: socket.socket, stop: threading.Event) -> None:
        for byte in b"HTTP/1.1 200 OK\r\nx-slow: " + b"a" * 100000:
            if stop.is_set():
                return
            conn.sendall(bytes([byte]))
            time.sleep(byte_every_s)

    return loopback_server(answer)


@pytest.mark.parametrize("server", [lambda: raw_server(trickle_s=0.02), lambda: trickled_head_server(byte_every_s=0.02)],
                         ids=["body", "status line and headers"])
def test_a_trickled_answer_times_out_at_the_deadline_though_every_read_is_quick(server):
    """One byte per 20 ms against a 0.25 s read timeout, in the body or before it: the 0.5 s deadline ends the call."""
    with server() as url, deadline_client(0.25, base_url=url) as client:
        start = time.monotonic()
        with pytest.raises(httpx.ReadTimeout, match=r"within 0.5 s in all"):
            client.post("/v1/chat/completions", json={})
        assert 0.5 <= time.monotonic() - start < 3.0
    assert DEADLINE_READ_TIMEOUTS * 0.25 == 0.5


def test_a_prompt_answer_is_read_whole_and_the_connection_reused():
    with raw_server(trickle_s=None) as url, deadline_client(5.0, base_url=url) as client:
        assert [client.post("/x", json={}).json() for _ in range(3)] == [{"ok": True}] * 3


def test_a_rollouts_http_client_reports_the_trickle_as_a_timeout_after_its_retries():
    """What the agents make of it: the call's attempts are timeouts and the call fails typed, not hangs."""
    with raw_server(trickle_s=0.02) as url, HttpServers(url, timeout_s=0.1).open() as (model, _):
        with pytest.raises(CallFailed) as failed:
            post_json(model, "/v1/chat/completions", {"messages": []}, retry=RetryPolicy(max_attempts=2))
    assert failed.value.kind == "timeout"
    assert [a.outcome for a in failed.value.attempts] == ["timeout", "timeout"]
    assert "in all" in failed.value.attempts[0].detail


def test_the_deadline_must_be_positive():
    with pytest.raises(ValueError, match="total_s=0"):
        DeadlineTransport(0)


def test_a_silent_server_is_still_a_read_timeout_of_the_read_not_of_the_deadline():
    """Nothing at all arrives: the per-read timeout (0.25 s) ends the call before the 0.5 s deadline, as httpx says."""
    with trickled_head_server(byte_every_s=60.0) as url, deadline_client(0.25, base_url=url) as client:
        start = time.monotonic()
        with pytest.raises(httpx.ReadTimeout) as info:
            client.post("/v1/chat/completions", json={})
        assert "in all" not in str(info.value)
        assert 0.25 <= time.monotonic() - start < 0.5 + 0.5
