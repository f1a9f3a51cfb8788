"""The request-body deadline: a body not complete within ``body_timeout_s`` gets 408 and a closed connection.

Before it, a client that declared more bytes than it sent (or stopped mid-body) held its server
connection and handler forever. The middleware tests drive `BodyLimitMiddleware` with a scripted
ASGI client; the socket tests send a short body to a real uvicorn server on 127.0.0.1, the way
`compactsim serve` and `--server http` serve. Deadlines are lowered to keep every test well under
a second.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from pydantic import ValidationError

from compactsim.mock_servers.limits import BODY_IN_MEMORY, BodyLimitMiddleware
from compactsim.mock_servers.model_server import Limits, ServerSettings, create_app
from compactsim.mock_servers.reward_server import RewardSettings
from compactsim.mock_servers.reward_server import create_app as create_reward_app
from compactsim.mock_servers.serving import inprocess_client, serve_on_loopback
from tests.unit.mock_servers.model_server.server_builders import SCRIPT, chat_body, meta

pytestmark = pytest.mark.timeout(60)

# ------------------------------------------------------------------------------------- middleware


def _scope(headers: list[tuple[bytes, bytes]], path: str = "/v1/chat/completions", method: str = "POST") -> dict:
    return {"type": "http", "method": method, "path": path, "headers": headers}


def _client(*messages: dict, then_after_s: float | None = None):
    """An ASGI `receive`: `messages` at once, then silence (a stalled client), or a disconnect after `then_after_s`."""
    queue = list(messages)

    async def receive() -> dict:
        if queue:
            return queue.pop(0)
        if then_after_s is None:
            await asyncio.Event().wait()
        await asyncio.sleep(then_after_s)
        return {"type": "http.disconnect"}

    return receive


def _chunk(body: bytes, more: bool = True) -> dict:
    return {"type": "http.request", "body": body, "more_body": more}


async def _reading_app(scope, receive, send) -> None:
    """Reads the whole body as Starlette's `request.body()` does, answers it back, then waits for the disconnect."""
    body = b""
    while True:
        msg = await receive()
        body += msg.get("body", b"")
        if not msg.get("more_body", False):
            break
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})
    assert (await receive())["type"] == "http.disconnect"  # after the body: no deadline applies


async def _ignoring_app(scope, receive, send) -> None:
    """Answers without reading the body (a GET route)."""
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b"{}"})


def _run(app, scope: dict, receive, *, in_memory: bool = False, **options) -> tuple[list[dict], list[tuple], float]:
    """(messages sent, calls of the refusal hook, loop seconds taken) for one request through the middleware."""
    sent: list[dict] = []
    heard: list[tuple] = []

    async def send(msg: dict) -> None:
        sent.append(msg)

    async def main() -> float:
        BODY_IN_MEMORY.set(in_memory)
        middleware = BodyLimitMiddleware(app, on_refusal=lambda *a: heard.append(a), **options)
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.wait_for(middleware(scope, receive, send), 5.0)  # a regression fails, not hangs
        return loop.time() - start

    return sent, heard, asyncio.run(main())


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _answer(sent: list[dict]) -> tuple[int, dict[bytes, bytes], bytes]:
    return sent[0]["status"], dict(sent[0]["headers"]), sent[1]["body"]


def test_a_body_short_of_its_content_length_gets_408_naming_the_limit_and_closes():
    scope = _scope([(b"content-length", b"100")])
    sent, heard, took = _run(_reading_app, scope, _client(_chunk(b"0123456789")), max_body_bytes=1024,
                             body_timeout_s=0.05)
    status, headers, body = _answer(sent)
    expected = {"detail": "body: not complete within the limit of 0.05 s: 10 of 100 declared bytes arrived",
                "field": "body", "limit": "body_timeout_s"}
    assert (status, headers[b"connection"], json.loads(body)) == (408, b"close", expected)
    assert heard == [("/v1/chat/completions", 408, _sha(b"0123456789"), expected, body)]
    assert 0.05 <= took < 1.0


def test_a_chunked_body_that_stops_gets_408_counting_what_arrived():
    scope = _scope([(b"transfer-encoding", b"chunked")])
    sent, heard, _ = _run(_reading_app, scope, _client(_chunk(b"ab"), _chunk(b"cde")), max_body_bytes=1024,
                          body_timeout_s=0.05)
    status, headers, body = _answer(sent)
    assert (status, headers[b"connection"]) == (408, b"close")
    assert json.loads(body)["detail"] == "body: not complete within the limit of 0.05 s: 5 bytes arrived"
    assert heard[0][1:3] == (408, _sha(b"abcde"))


def test_a_body_completed_in_time_is_served_and_the_deadline_ends_with_it():
    """Chunks, then a disconnect that comes after the deadline: the app sees the body and the disconnect, not a 408."""
    scope = _scope([(b"content-length", b"6")])
    receive = _client(_chunk(b"abc"), _chunk(b"def", more=False), then_after_s=0.1)
    sent, heard, _ = _run(_reading_app, scope, receive, max_body_bytes=1024, body_timeout_s=0.05)
    assert (_answer(sent), heard) == ((200, {}, b"abcdef"), [])


def test_a_stalled_body_over_the_cap_gets_its_413_at_the_deadline():
    """The drain before a 413 waited for the rest of a declared body without limit too."""
    scope = _scope([(b"content-length", b"10000")])
    sent, heard, took = _run(_reading_app, scope, _client(_chunk(b"x" * 100)), max_body_bytes=1024,
                             body_timeout_s=0.05)
    status, headers, body = _answer(sent)
    answer = {"detail": "body: request body is 10000 bytes; the limit is 1024", "field": "body", "limit": "max_body_bytes"}
    assert (status, headers[b"connection"], json.loads(body)) == (413, b"close", answer)
    assert heard == [("/v1/chat/completions", 413, _sha(b"x" * 100), answer, body)] and took < 1.0


def test_a_streamed_body_over_the_cap_is_drained_and_its_413_names_the_bytes_read():
    """The hook's digest covers what the app read before the cap was crossed and what the drain read after it."""
    scope = _scope([(b"transfer-encoding", b"chunked")])
    receive = _client(_chunk(b"a" * 600), _chunk(b"b" * 600), _chunk(b"c" * 100, more=False))
    sent, heard, _ = _run(_reading_app, scope, receive, max_body_bytes=1024, body_timeout_s=0.5)
    status, headers, body = _answer(sent)
    answer = {"detail": "body: request body is 1300 bytes; the limit is 1024", "field": "body", "limit": "max_body_bytes"}
    assert (status, headers.get(b"connection"), json.loads(body)) == (413, None, answer)  # drained: the connection stays
    assert heard == [("/v1/chat/completions", 413, _sha(b"a" * 600 + b"b" * 600 + b"c" * 100), answer, body)]


def test_a_body_that_fits_its_cap_is_never_heard_of():
    scope = _scope([(b"content-length", b"1024")])
    sent, heard, _ = _run(_reading_app, scope, _client(_chunk(b"z" * 1024, more=False), then_after_s=0.01),
                          max_body_bytes=1024, body_timeout_s=0.5)
    assert (_answer(sent)[0], heard) == (200, [])


def test_a_body_held_in_memory_gets_no_deadline():
    """The in-process transport's body is complete before the app runs: no timer, however slow a receive."""
    scope = _scope([(b"content-length", b"3")])
    receive_calls = [_chunk(b"abc", more=False)]

    async def slow_receive() -> dict:
        await asyncio.sleep(0.1)  # twice the deadline
        return receive_calls.pop(0) if receive_calls else {"type": "http.disconnect"}

    sent, heard, _ = _run(_reading_app, scope, slow_receive, in_memory=True, max_body_bytes=1024, body_timeout_s=0.05)
    assert (_answer(sent), heard) == ((200, {}, b"abc"), [])


@pytest.mark.parametrize(("headers", "closes"), [
    ([(b"content-length", b"100")], True),
    ([(b"transfer-encoding", b"chunked")], True),
    ([(b"content-length", b"0")], False),
    ([], False),
])
def test_an_answer_sent_before_the_body_was_read_closes_the_connection(headers, closes):
    """Else the unread rest keeps the connection open with no deadline (uvicorn waits for it before the next request)."""
    sent, _, _ = _run(_ignoring_app, _scope(headers, path="/health", method="GET"), _client(), max_body_bytes=1024,
                      body_timeout_s=0.05)
    status, answer_headers, _ = _answer(sent)
    assert (status, answer_headers.get(b"connection")) == (200, b"close" if closes else None)


@pytest.mark.parametrize("value", [0, 0.0, -1, 3600.5, float("nan"), float("inf")])
def test_body_timeout_s_must_be_positive_and_at_most_an_hour(value):
    with pytest.raises(ValidationError, match="body_timeout_s"):
        Limits(body_timeout_s=value)
    with pytest.raises(ValidationError, match="body_timeout_s"):
        RewardSettings(body_timeout_s=value)


def test_body_timeout_s_defaults_to_10_s():
    assert (Limits().body_timeout_s, RewardSettings().body_timeout_s) == (10.0, 10.0)


# ------------------------------------------------------------------------------------- real sockets


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _exchange(port: int, raw: bytes) -> tuple[bytes, float]:
    """Send `raw`, then read until the server closes; (everything read, seconds until the close)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10.0) as sock:
        start = time.monotonic()
        sock.sendall(raw)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        return data, time.monotonic() - start


def _read_answer(sock: socket.socket) -> bytes:
    """One whole HTTP answer (headers, then `content-length` bytes of body) off a connection kept open."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    length = int(_parse(data)[1]["content-length"])
    while len(data.partition(b"\r\n\r\n")[2]) < length:
        data += sock.recv(65536)
    return data


def _parse(data: bytes) -> tuple[str, dict[str, str], bytes]:
    head, _, body = data.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    return status, {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}, body


@contextmanager
def _model_server(**limits) -> Iterator[str]:
    with serve_on_loopback(create_app(ServerSettings(seed=7, script=SCRIPT, limits=Limits(**limits)))) as url:
        yield url


def test_a_short_body_gets_408_within_the_deadline_over_a_real_socket_and_is_logged():
    sent = b'{"messages":'
    raw = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
           b"content-length: 200\r\n\r\n" + sent)
    with _model_server(body_timeout_s=0.3) as url:
        data, took = _exchange(_port(url), raw)
        log = httpx.get(url + "/request_log").json()["entries"]
    status, headers, body = _parse(data)
    expected = {"detail": "body: not complete within the limit of 0.3 s: 12 of 200 declared bytes arrived",
                "field": "body", "limit": "body_timeout_s"}
    assert (status, headers["connection"], json.loads(body)) == ("HTTP/1.1 408 Request Timeout", "close", expected)
    assert 0.3 <= took < 2.0, took  # answered at the deadline, and the server closed the connection
    assert log == [{"seq": 0, "endpoint": "chat", "status": 408, "request_digest": hashlib.sha256(sent).hexdigest(),
                    "response_digest": hashlib.sha256(body).hexdigest(), "policy_version": 0, "rollout_id": None,
                    "turn": None, "faults": [], "prompt_tokens": None, "generated_tokens": None,
                    "detail": expected["detail"], "attempt": None, "key_source": None, "file_error": None}]


def test_a_body_over_its_cap_gets_413_over_a_real_socket_and_is_logged_with_the_bytes_read():
    """The 413 was the one refusal of a generation route the request log never saw."""
    sent = b'{"messages":[' + b" " * 3000 + b"]}"
    raw = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
           b"content-length: %d\r\n\r\n" % len(sent) + sent)
    with _model_server(max_body_bytes=2048) as url, socket.create_connection(("127.0.0.1", _port(url)), timeout=10.0) as sock:
        sock.sendall(raw)
        status, headers, body = _parse(_read_answer(sock))
        weights = httpx.post(url + "/weights", content=b"x" * 10)  # not a logged route: its refusal is not logged
        log = httpx.get(url + "/request_log").json()["entries"]
    expected = {"detail": f"body: request body is {len(sent)} bytes; the limit is 2048", "field": "body",
                "limit": "max_body_bytes"}
    assert (status.split(" ", 2)[1], json.loads(body)) == ("413", expected)
    assert weights.status_code == 422
    assert [(e["endpoint"], e["status"], e["request_digest"], e["response_digest"], e["detail"]) for e in log] == [
        ("chat", 413, hashlib.sha256(sent).hexdigest(), hashlib.sha256(body).hexdigest(), json.loads(body)["detail"])]


def test_the_reward_server_answers_a_short_body_with_408_too():
    raw = b"POST /verify HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 50\r\n\r\n{}"
    with serve_on_loopback(create_reward_app(RewardSettings(body_timeout_s=0.3))) as url:
        data, took = _exchange(_port(url), raw)
    status, headers, body = _parse(data)
    assert (status, headers["connection"], json.loads(body)) == ("HTTP/1.1 408 Request Timeout", "close", {
        "detail": "body: not complete within the limit of 0.3 s: 2 of 50 declared bytes arrived",
        "field": "body", "limit": "body_timeout_s"})
    assert 0.3 <= took < 2.0, took


def test_a_stalled_client_blocks_no_one_else_and_a_slow_but_complete_body_is_served():
    good = json.dumps(chat_body(metadata=meta("r1", 1))).encode()
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n" % len(good))
    with _model_server(body_timeout_s=1.0) as url, socket.create_connection(("127.0.0.1", _port(url)), timeout=10.0) as stalled:
        stalled.sendall(head + good[:5])  # holds its connection until the deadline
        other = httpx.post(url + "/v1/chat/completions", content=good, headers={"content-type": "application/json"})
        with socket.create_connection(("127.0.0.1", _port(url)), timeout=10.0) as slow:
            slow.sendall(head + good[:10])
            time.sleep(0.1)
            slow.sendall(good[10:])
            status, headers, body = _parse(_read_answer(slow))
    assert other.status_code == 200
    assert (status, "connection" in headers, body) == ("HTTP/1.1 200 OK", False, other.content)


def test_a_get_with_an_unread_body_is_answered_and_closed_at_once():
    with _model_server(body_timeout_s=5.0) as url:
        data, took = _exchange(_port(url), b"GET /health HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\nab")
    status, headers, body = _parse(data)
    assert (status, headers["connection"], json.loads(body)["status"]) == ("HTTP/1.1 200 OK", "close", "ok")
    assert took < 2.0, took  # neither the 5 s deadline nor uvicorn's 5 s keep-alive timeout


def test_the_in_process_transport_is_unaffected_by_the_deadline():
    """Its body is complete in memory: even a nanosecond deadline changes no answer byte."""
    body = chat_body(metadata=meta("r1", 1))
    answers = []
    for limits in (Limits(), Limits(body_timeout_s=1e-9)):
        with inprocess_client(create_app(ServerSettings(seed=7, script=SCRIPT, limits=limits)), base_url="http://model",
                              timeout_s=30.0) as client:
            answers.append(client.post("/v1/chat/completions", json=body))
    assert [r.status_code for r in answers] == [200, 200]
    assert answers[0].content == answers[1].content
