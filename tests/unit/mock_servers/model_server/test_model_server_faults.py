"""Every declared fault switch is observed by a client, and fires only where its selectors say."""

from __future__ import annotations

import json

import httpx
import pytest

from compactsim.harness.core import tokenizer as tok
from compactsim.mock_servers.model_server import FaultSpec, ServerSettings
from compactsim.mock_servers.model_server.settings import FAULT_KINDS
from tests.unit.mock_servers.model_server.server_builders import SCRIPT, chat_body, client_for, live_server, meta, user_items


def _settings(*faults: FaultSpec) -> ServerSettings:
    return ServerSettings(seed=3, script=SCRIPT, faults=faults)


def _chat(settings: ServerSettings, **extra) -> httpx.Response:
    with client_for(settings) as c:
        return c.post("/v1/chat/completions", json=chat_body(metadata=meta("r1", 1), **extra))


def _clean_chat() -> dict:
    return _chat(_settings()).json()


@pytest.mark.parametrize("kind", ["http_500", "http_503"])
def test_http_error_faults_return_their_status(kind):
    with client_for(_settings(FaultSpec(kind=kind))) as c:
        r = c.post("/v1/chat/completions", json=chat_body(metadata=meta("r1", 1)))
        log = c.get("/request_log").json()["entries"]
    assert r.status_code == int(kind[-3:])
    assert r.json() == {"detail": f"injected fault: {kind}"}
    assert (log[-1]["status"], log[-1]["faults"]) == (int(kind[-3:]), [kind])


def test_truncated_json_fault_sends_half_a_body():
    clean = _chat(_settings()).content
    r = _chat(_settings(FaultSpec(kind="truncated_json")))
    assert r.status_code == 200
    assert r.content == clean[: len(clean) // 2]
    with pytest.raises(json.JSONDecodeError):
        r.json()


def test_missing_logprobs_fault_drops_them_on_both_endpoints():
    settings = _settings(FaultSpec(kind="missing_logprobs"))
    assert _chat(settings).json()["choices"][0]["logprobs"] is None
    with client_for(settings) as c:
        last = c.post("/v1/responses", json={"input": user_items(), "metadata": meta("r1", 1)}).json()["output"][-1]
    assert "generation_log_probs" not in last
    assert "generation_token_ids" in last


def test_logprob_length_mismatch_fault_returns_one_logprob_fewer():
    choice = _chat(_settings(FaultSpec(kind="logprob_length_mismatch"))).json()["choices"][0]
    assert len(choice["logprobs"]["content"]) == len(choice["token_ids"]) - 1


@pytest.mark.parametrize(("kind", "delta"), [("surplus_route_rows", 2), ("missing_route_rows", -2),
                                            ("one_surplus_route_row", 1)])
def test_route_row_faults_change_the_row_count(kind, delta):
    body = _chat(_settings(FaultSpec(kind=kind))).json()
    n = len(body["prompt_token_ids"]) + len(body["choices"][0]["token_ids"])
    assert len(body["choices"][0]["message"]["routed_experts"]) == n + delta


def test_no_routes_fault_leaves_routed_experts_out_and_keeps_the_tokens():
    clean = _clean_chat()
    body = _chat(_settings(FaultSpec(kind="no_routes"))).json()
    assert "routed_experts" in clean["choices"][0]["message"]
    assert "routed_experts" not in body["choices"][0]["message"]
    assert body["choices"][0]["token_ids"] == clean["choices"][0]["token_ids"]
    assert body["choices"][0]["logprobs"] == clean["choices"][0]["logprobs"]


def test_finish_length_fault_drops_the_stop_token():
    clean = _clean_chat()["choices"][0]
    choice = _chat(_settings(FaultSpec(kind="finish_length"))).json()["choices"][0]
    assert choice["finish_reason"] == "length"
    assert clean["token_ids"][-1] == tok.TURN_END
    assert choice["token_ids"] == clean["token_ids"][:-1]


def test_slow_fault_delays_but_does_not_change_the_answer():
    settings = _settings(FaultSpec(kind="slow", delay_s=0.01))
    with client_for(settings) as c:
        r = c.post("/v1/chat/completions", json=chat_body(metadata=meta("r1", 1)))
        log = c.get("/request_log").json()["entries"]
    assert r.content == _chat(_settings()).content
    assert log[-1]["faults"] == ["slow"]


def test_timeout_fault_trips_the_client_read_timeout():
    settings = _settings(FaultSpec(kind="timeout", delay_s=1.5))
    with live_server(settings) as url, httpx.Client(base_url=url, timeout=httpx.Timeout(5.0, read=0.3)) as c:
        with pytest.raises(httpx.ReadTimeout):
            c.post("/v1/chat/completions", json=chat_body(metadata=meta("r1", 1)))


def test_drop_connection_fault_closes_the_socket_mid_body():
    settings = _settings(FaultSpec(kind="drop_connection"))
    with live_server(settings) as url, httpx.Client(base_url=url, timeout=10.0) as c:
        with pytest.raises(httpx.RemoteProtocolError):
            c.post("/v1/chat/completions", json=chat_body(metadata=meta("r1", 1)))
        assert c.get("/health").status_code == 200  # the server itself keeps running


def test_fault_selectors_match_rollout_turn_and_endpoint():
    settings = _settings(FaultSpec(kind="http_503", rollout_id="r1", turn=2, endpoint="responses"))
    with client_for(settings) as c:
        hit = c.post("/v1/responses", json={"input": "x", "metadata": meta("r1", 2)})
        other_turn = c.post("/v1/responses", json={"input": "x", "metadata": meta("r1", 1)})
        other_endpoint = c.post("/v1/chat/completions", json=chat_body(metadata=meta("r1", 2)))
        no_metadata = c.post("/v1/responses", json={"input": "x"})
    assert [r.status_code for r in (hit, other_turn, other_endpoint, no_metadata)] == [503, 200, 200, 200]


def test_fault_attempt_selector_fires_only_on_the_listed_attempts():
    settings = _settings(FaultSpec(kind="http_503", rollout_id="r1", turn=1, attempts=(1, 2)))
    with client_for(settings) as c:
        statuses = [
            c.post("/v1/responses", json={"input": "x", "metadata": {**meta("r1", 1), **extra}}).status_code
            for extra in ({}, {"compactsim_attempt": "2"}, {"compactsim_attempt": "3"})
        ]
        bad = c.post("/v1/responses", json={"input": "x", "metadata": {**meta("r1", 1), "compactsim_attempt": "zero"}})
    assert statuses == [503, 503, 200]
    assert bad.status_code == 422
    assert "metadata.compactsim_attempt: expected an int >= 1" in bad.text


def test_fault_probability_is_decided_by_the_request_digest():
    settings = _settings(FaultSpec(kind="http_500", probability=0.5))
    statuses = []
    for _ in range(2):
        with client_for(settings) as c:
            statuses.append([c.post("/v1/chat/completions", json=chat_body([{"role": "user", "content": f"q{i}"}])).status_code
                             for i in range(24)])
    assert statuses[0] == statuses[1]
    assert 0 < statuses[0].count(500) < 24


def test_every_fault_kind_is_documented_and_covered():
    assert set(FAULT_KINDS) == {
        "http_500", "http_503", "timeout", "slow", "truncated_json", "drop_connection", "missing_logprobs",
        "logprob_length_mismatch", "surplus_route_rows", "missing_route_rows", "no_routes", "one_surplus_route_row",
        "finish_length",
    }
    with pytest.raises(ValueError):
        FaultSpec(kind="explode")  # type: ignore[arg-type]
