"""Over a real uvicorn socket: error answers keep the keep-alive connection, and `/health` stays responsive.

Each test serves on 127.0.0.1 (a free port) in a thread and talks to it with one `httpx.Client`,
so every request after the first reuses one TCP connection unless the server closed it.
"""

from __future__ import annotations

import json
import statistics
import threading
import time

import httpx
import pytest

from compactsim.mock_servers.model_server import Limits, ServerSettings, create_app
from compactsim.mock_servers.reward_server import RewardSettings
from compactsim.mock_servers.reward_server import create_app as create_reward_app
from compactsim.mock_servers.serving import serve_on_loopback
from tests.unit.mock_servers.model_server.server_builders import SCRIPT, chat_body, meta

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

JSON = {"content-type": "application/json"}


def _local_port(r: httpx.Response) -> int:
    """The client-side port of the connection that carried `r` (same port = same connection)."""
    return r.extensions["network_stream"].get_extra_info("client_addr")[1]


def _bad_model_requests() -> list[tuple[str, bytes]]:
    hi = '"messages":[{"role":"user","content":"hi"}]'
    return [
        ("/v1/chat/completions", ("{" + hi + ',"max_tokens":' + "9" * 5000 + "}").encode()),
        ("/v1/chat/completions", ("{" + hi + ',"x":' + "[" * 100_000 + "]" * 100_000 + "}").encode()),
        ("/v1/responses", json.dumps({"input": "hi", "metadata": {"compactsim_rollout_id": "r1",
                                                                  "compactsim_turn": "9" * 5000}}).encode()),
        ("/v1/chat/completions", ("{" + hi + ',"temperature":Infinity}').encode()),
        ("/tokenize", json.dumps({"prompt": "a" * 5_000_000}).encode()),
        ("/v1/chat/completions", b"\xff\x00 not json"),
        ("/v1/chat/completions", json.dumps(chat_body([{"role": "user", "content": "x" * 9_000_000}])).encode()),  # 413
    ]


def test_bad_requests_then_good_ones_share_one_keep_alive_connection():
    settings = ServerSettings(seed=7, script=SCRIPT, limits=Limits(max_body_bytes=8 * 1024 * 1024))
    good = chat_body(metadata=meta("r1", 1))
    with serve_on_loopback(create_app(settings)) as url, httpx.Client(base_url=url, timeout=30.0) as client:
        first = client.post("/v1/chat/completions", json=good)
        port = _local_port(first)
        statuses = []
        for path, raw in _bad_model_requests():
            bad = client.post(path, content=raw, headers=JSON)
            statuses.append(bad.status_code)
            assert "limit" in bad.json() or bad.json()["detail"][0]["type"] == "json_invalid"
            for _ in range(3):
                again = client.post("/v1/chat/completions", json=good)
                assert again.content == first.content
                assert _local_port(again) == port, f"connection closed after {path} ({bad.status_code})"
    assert statuses == [422, 422, 422, 422, 422, 422, 413]


def test_a_body_past_the_drain_bound_is_refused_with_connection_close_and_the_client_recovers():
    """Over 4x the cap the server stops reading: the 413 says `connection: close`, the next request reconnects."""
    settings = ServerSettings(seed=7, script=SCRIPT, limits=Limits(max_body_bytes=64 * 1024))
    with serve_on_loopback(create_app(settings)) as url, httpx.Client(base_url=url, timeout=30.0) as client:
        within = client.post("/tokenize", content=b" " * (200 * 1024), headers=JSON)
        same = client.post("/tokenize", json={"prompt": "ok"})
        assert _local_port(same) == _local_port(within)
        past = client.post("/tokenize", content=b" " * (4 * 1024 * 1024), headers=JSON)
        after = client.post("/tokenize", json={"prompt": "ok"})
    assert (within.status_code, within.headers.get("connection"), same.status_code) == (413, None, 200)
    assert (past.status_code, past.headers["connection"], past.json()["limit"]) == (413, "close", "max_body_bytes")
    assert (after.status_code, after.json()["count"]) == (200, 2)


def test_reward_server_errors_keep_the_connection():
    with serve_on_loopback(create_reward_app(RewardSettings(max_body_bytes=16 * 1024))) as url, \
            httpx.Client(base_url=url, timeout=30.0) as client:
        port = _local_port(client.post("/verify", json={"response": {}}))
        bodies = [b'{"response":{},"rollout_index":' + b"9" * 5000 + b"}", b'{"response":' + b"[" * 5_000 + b"]" * 5_000 + b"}",
                  b'{"response":{"x":NaN}}', b'{"response":{"pad":"' + b"x" * 20_000 + b'"}}']
        statuses = []
        for raw in bodies:
            statuses.append(client.post("/verify", content=raw, headers=JSON).status_code)
            ok = client.post("/verify", json={"response": {}, "rollout_index": 2})
            assert (ok.status_code, ok.json()["rollout_index"], _local_port(ok)) == (200, 2, port)
    assert statuses == [422, 422, 422, 413]


def _health_latencies(url: str, path: str, raw: bytes) -> tuple[list[float], httpx.Response]:
    """Probe `/health` every 10 ms while one large request is in flight on another connection."""
    box: dict[str, httpx.Response] = {}

    def large() -> None:
        box["r"] = httpx.post(url + path, content=raw, headers=JSON, timeout=60.0)

    with httpx.Client(base_url=url, timeout=30.0) as probe:
        probe.get("/health")
        worker = threading.Thread(target=large)
        worker.start()
        time.sleep(0.05)
        latencies = []
        while worker.is_alive():
            start = time.perf_counter()
            assert probe.get("/health").status_code == 200
            latencies.append(time.perf_counter() - start)
            time.sleep(0.01)
        worker.join()
    return latencies, box["r"]


def _large_chat() -> tuple[ServerSettings, bytes]:
    """A 2.6 MB chat body of 50,000 messages: rendering and validating it takes ~0.5 s of CPU."""
    settings = ServerSettings(seed=7, script=SCRIPT, return_routed_experts=False,
                              limits=Limits(max_prompt_tokens=4_000_000))
    body = {"messages": [{"role": "user", "content": "a" * 20} for _ in range(50_000)]}
    return settings, json.dumps(body).encode()


def test_health_answers_within_100_ms_while_a_large_request_is_in_flight():
    settings, raw = _large_chat()
    with serve_on_loopback(create_app(settings)) as url:
        latencies, large = _health_latencies(url, "/v1/chat/completions", raw)
    assert large.status_code == 200
    assert len(latencies) >= 5, "the large request finished too fast to probe"
    # The claim: probes answer within 100 ms while the request is worked on. The work runs on another
    # thread, but one long C call there (json.loads of the whole body) holds the GIL for its duration,
    # so a single probe may wait for it; 80% of them must not, and none may wait for the whole request.
    fast = sum(1 for t in latencies if t < 0.1)
    assert statistics.median(latencies) < 0.1 and fast >= 0.8 * len(latencies), latencies
    assert max(latencies) < 1.0, latencies


def test_health_probe_is_blocked_when_the_pipeline_runs_on_the_loop(monkeypatch):
    """The control: the same request handled on the serving loop delays `/health` past 100 ms."""
    import compactsim.mock_servers.model_server.limits as model_limits

    async def inline(make):
        return await make()

    monkeypatch.setattr(model_limits, "run_off_loop", inline)
    settings, raw = _large_chat()
    with serve_on_loopback(create_app(settings)) as url:
        latencies, large = _health_latencies(url, "/v1/chat/completions", raw)
    assert large.status_code == 200
    assert latencies and max(latencies) > 0.1, latencies


def test_a_server_bug_answers_a_json_500_and_keeps_the_connection():
    from fastapi import FastAPI

    from compactsim.mock_servers.limits import ErrorGuardMiddleware

    app = FastAPI()

    @app.get("/bug")
    async def bug() -> None:
        raise RuntimeError("boom")

    @app.get("/ok")
    async def ok() -> dict[str, bool]:
        return {"ok": True}

    app.add_middleware(ErrorGuardMiddleware)
    with serve_on_loopback(app) as url, httpx.Client(base_url=url, timeout=10.0) as client:
        port = _local_port(client.get("/ok"))
        broken = client.get("/bug")
        after = client.get("/ok")
        same = _local_port(after) == port
    assert (broken.status_code, broken.json()) == (500, {"detail": "internal error: RuntimeError", "field": None, "limit": None})
    assert (after.json(), same) == ({"ok": True}, True)
