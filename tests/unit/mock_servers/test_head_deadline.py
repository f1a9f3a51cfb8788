"""Over a real socket: the request line and headers are due within ``body_timeout_s``, like the body.

Before, a client that connected and sent nothing, or part of its headers (one byte now and then),
held a server connection for good: uvicorn times only an idle keep-alive connection. Also here:
what a hostile or vanishing client gets from the other edges of the HTTP boundary (a declared
length of 20 digits, a disconnect mid-body, a bad chunk).
"""

from __future__ import annotations

import json
import logging
import socket
import time

import httpx
import pytest

from compactsim.mock_servers.head_deadline import DEFAULT_HEAD_TIMEOUT_S, head_deadline_protocol, uvicorn_config
from compactsim.mock_servers.model_server import Limits, ServerSettings, create_app
from compactsim.mock_servers.reward_server import RewardSettings
from compactsim.mock_servers.reward_server import create_app as create_reward_app
from compactsim.mock_servers.serving import serve_on_loopback
from tests.unit.mock_servers.model_server.server_builders import SCRIPT, chat_body, meta
from tests.unit.mock_servers.test_body_deadline import _exchange, _parse, _port, _read_answer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]  # real sockets, waiting out deadlines

HEAD_408 = {"detail": "headers: the request line and headers did not arrive within the limit of 0.4 s",
            "field": "headers", "limit": "body_timeout_s"}


def _model_url(timeout_s: float = 0.4):
    return serve_on_loopback(create_app(ServerSettings(seed=7, script=SCRIPT, limits=Limits(body_timeout_s=timeout_s))))


def _good_request() -> bytes:
    body = json.dumps(chat_body(metadata=meta("r1", 1))).encode()
    return (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(body), body))


@pytest.mark.parametrize("sent", [b"", b"POS", b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-le"],
                         ids=["nothing", "part of the request line", "part of the headers"])
def test_a_head_not_complete_in_time_gets_a_json_408_and_the_connection_closes(sent):
    with _model_url() as url:
        data, took = _exchange(_port(url), sent)
    status, headers, body = _parse(data)
    assert (status, headers["connection"], json.loads(body)) == ("HTTP/1.1 408 Request Timeout", "close", HEAD_408)
    assert 0.4 <= took < 2.0, took


def test_a_head_trickled_one_byte_at_a_time_cannot_hold_the_connection():
    """Every byte resets nothing: the deadline counts from the connection opening."""
    with _model_url() as url, socket.create_connection(("127.0.0.1", _port(url)), timeout=10.0) as sock:
        start = time.monotonic()
        data = b""
        for byte in b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n" + b"x-slow: " + b"a" * 200:
            try:
                sock.sendall(bytes([byte]))
            except OSError:  # the server has answered and closed
                break
            time.sleep(0.02)
            if time.monotonic() - start > 1.5:
                break
        while chunk := sock.recv(65536):
            data += chunk
        took = time.monotonic() - start
    assert json.loads(_parse(data)[2]) == HEAD_408
    assert took < 1.5, took


def test_the_deadline_restarts_after_each_answer_and_never_times_a_handler_or_a_body():
    """A keep-alive connection: a complete request is served however long its answer takes, the next head is
    timed from the previous answer, and a head that then stalls gets the 408."""
    settings = ServerSettings(seed=7, script=SCRIPT, limits=Limits(body_timeout_s=0.4),
                              faults=[{"kind": "timeout", "delay_s": 0.6, "rollout_id": "r1", "turn": 1}])
    with serve_on_loopback(create_app(settings)) as url, \
            socket.create_connection(("127.0.0.1", _port(url)), timeout=10.0) as sock:
        sock.sendall(_good_request())  # its answer is delayed 0.6 s, past the head deadline
        first = _parse(_read_answer(sock))
        time.sleep(0.3)
        sock.sendall(_good_request())
        second = _parse(_read_answer(sock))
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\n")  # then nothing more
        start = time.monotonic()
        rest = b""
        while chunk := sock.recv(65536):
            rest += chunk
    assert (first[0], second[0]) == ("HTTP/1.1 200 OK", "HTTP/1.1 200 OK")
    assert json.loads(_parse(rest)[2]) == HEAD_408
    assert time.monotonic() - start < 2.0


def test_the_reward_server_times_its_heads_with_its_own_body_timeout_s():
    with serve_on_loopback(create_reward_app(RewardSettings(body_timeout_s=0.4))) as url:
        data, took = _exchange(_port(url), b"POST /verify HTTP/1.1\r\n")
    assert json.loads(_parse(data)[2]) == HEAD_408
    assert 0.4 <= took < 2.0, took


def test_a_stalled_head_blocks_no_other_client():
    with _model_url() as url, socket.create_connection(("127.0.0.1", _port(url)), timeout=10.0) as stalled:
        stalled.sendall(b"POST /v1/chat/com")
        ok = httpx.post(url + "/v1/chat/completions", json=chat_body(metadata=meta("r1", 1)), timeout=5.0)
    assert ok.status_code == 200


def test_apps_without_a_stated_deadline_get_the_default_and_a_deadline_must_be_positive():
    assert uvicorn_config(object(), host="127.0.0.1", port=0).http.timeout_s == DEFAULT_HEAD_TIMEOUT_S == 10.0
    assert uvicorn_config(create_app(ServerSettings(limits=Limits(body_timeout_s=2.5))), host="127.0.0.1",
                          port=0).http.timeout_s == 2.5
    with pytest.raises(ValueError, match="timeout_s=0"):
        head_deadline_protocol(0)


# ------------------------------------------------------------------------ the rest of the boundary


@pytest.mark.parametrize("length", [b"1000000000000000000", b"99999999999999999999"])
def test_a_declared_length_of_19_or_20_digits_gets_413_not_408(length):
    """h11 refuses more than 20 digits itself (400); 19 and 20 used to be read as no declared length at all, so a
    client declaring 10^19 bytes got the body deadline's 408 instead of the cap's 413. The 413 comes once the
    client stops sending (here: at the body deadline), as for any declared length past the drain bound."""
    raw = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
           b"content-length: " + length + b"\r\n\r\n")
    with _model_url() as url:
        data, took = _exchange(_port(url), raw)
    status, _, body = _parse(data)
    assert (status.split(" ", 2)[1], json.loads(body)) == ("413", {
        "detail": "body: request body is declared as 10^18 bytes or more; the limit is 16777216",
        "field": "body", "limit": "max_body_bytes"})
    assert took < 2.0


def test_a_declared_length_with_leading_zeros_is_its_value():
    body = json.dumps(chat_body(metadata=meta("r1", 1))).encode()
    raw = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nconnection: close\r\n"
           b"content-length: " + str(len(body)).zfill(20).encode() + b"\r\n\r\n" + body)
    with serve_on_loopback(create_app(ServerSettings(seed=7, script=SCRIPT))) as url:
        data, _ = _exchange(_port(url), raw)
    assert _parse(data)[0] == "HTTP/1.1 200 OK"


@pytest.mark.parametrize("raw", [
    b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n" + b'{"messages"',
    b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
], ids=["disconnect mid-body", "bad chunk"])
@pytest.mark.parametrize("server", ["model", "reward"])
def test_a_client_gone_mid_body_leaves_no_traceback_and_the_server_serves_on(raw, server, caplog):
    app = create_app(ServerSettings(seed=7, script=SCRIPT)) if server == "model" else create_reward_app(RewardSettings())
    if server == "reward":
        raw = raw.replace(b"/v1/chat/completions", b"/verify")
    with caplog.at_level(logging.DEBUG, logger="compactsim.mock_servers"), serve_on_loopback(app) as url:
        with socket.create_connection(("127.0.0.1", _port(url)), timeout=10.0) as sock:
            sock.sendall(raw)
        time.sleep(0.3)
        health = httpx.get(url + ("/health" if server == "model" else "/openapi.json"), timeout=5.0)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert health.status_code in (200, 404)
