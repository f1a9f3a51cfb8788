"""`timeout` faults fire: every compactsim client times out before the longest allowed fault delay,
in process as over HTTP, and the agents' retry and give-up paths run the same both ways."""

from __future__ import annotations

import time

import httpx
import pytest

from compactsim.agents.collect import HttpServers, InProcessServers, collect
from compactsim.mock_servers.model_server import FaultSpec, ServerSettings, create_app
from compactsim.mock_servers.reward_server import RewardSettings
from compactsim.mock_servers.reward_server import create_app as create_reward_app
from compactsim.mock_servers.serving import HTTP_TIMEOUT_S, client_timeout_s, inprocess_client, open_mock_servers, serve_on_loopback
from compactsim.scenarios.build import model_server_settings, reward_server_settings, step_specs
from compactsim.scenarios.catalogue import default_catalogue
from compactsim.scenarios.model import FaultRef
from tests.unit.mock_servers.model_server.server_builders import SCRIPT, chat_body, meta

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")


def _max_scenario_delay() -> float:
    (le,) = [m.le for m in FaultRef.model_fields["delay_s"].metadata if getattr(m, "le", None) is not None]
    return float(le)


def test_default_client_timeout_is_shorter_than_the_longest_delay_a_scenario_may_declare():
    assert _max_scenario_delay() == 60.0
    assert client_timeout_s() == HTTP_TIMEOUT_S == 30.0
    assert HttpServers("http://127.0.0.1:1").timeout_s < _max_scenario_delay()


@pytest.mark.parametrize(("faults", "expected"), [
    ([], 30.0),
    ([{"kind": "slow", "delay_s": 0.01}, {"kind": "http_503"}], 30.0),
    ([{"kind": "timeout"}], 15.0),  # the default timeout delay is 30 s
    ([{"kind": "timeout", "delay_s": 60.0}], 30.0),
    ([{"kind": "timeout", "delay_s": 1.0, "turn": 2}, {"kind": "timeout", "delay_s": 0.4}], 0.2),
])
def test_a_declared_timeout_fault_shortens_the_clients_timeout_to_half_its_delay(faults, expected):
    assert client_timeout_s({"faults": faults}) == expected


def test_in_process_client_raises_httpx_read_timeout_and_cancels_the_stalled_call():
    settings = ServerSettings(seed=3, script=SCRIPT, faults=(FaultSpec(kind="timeout", turn=1, delay_s=5.0),))
    with inprocess_client(create_app(settings), base_url="http://model", timeout_s=0.2) as client:
        start = time.monotonic()
        with pytest.raises(httpx.ReadTimeout, match="^timed out$"):
            client.post("/v1/chat/completions", json=chat_body(metadata=meta("r1", 1)))
        waited = time.monotonic() - start
        ok = client.post("/v1/chat/completions", json=chat_body(metadata=meta("r1", 2)))
    assert 0.2 <= waited < 2.0
    assert ok.status_code == 200
    assert client.timeout.read == 0.2


@pytest.mark.parametrize("mode", ["inprocess", "http"])
def test_open_mock_servers_clients_carry_and_enforce_the_derived_timeout(mode):
    model = {"seed": 3, "script": {"r1": [s.model_dump(mode="json") for s in SCRIPT["r1"]]},
             "faults": [{"kind": "timeout", "turn": 2, "attempts": [1], "delay_s": 0.6}]}
    with open_mock_servers(model, {}, mode) as servers:  # type: ignore[arg-type]
        assert (servers.model.timeout.read, servers.reward.timeout.read) == (0.3, 0.3)
        assert servers.model.post("/v1/chat/completions", json=chat_body(metadata=meta("r1", 1))).status_code == 200
        with pytest.raises(httpx.ReadTimeout):
            servers.model.post("/v1/chat/completions", json=chat_body(metadata={**meta("r1", 2), "compactsim_attempt": "1"}))
        retried = servers.model.post("/v1/chat/completions", json=chat_body(metadata={**meta("r1", 2), "compactsim_attempt": "2"}))
        assert retried.status_code == 200


def _collect_both_ways(name: str):
    scenario = default_catalogue().get(name)
    specs = step_specs(scenario, 0)
    model, reward = model_server_settings(scenario), reward_server_settings(scenario)
    in_process = collect(specs, InProcessServers(model, reward))
    with serve_on_loopback(create_app(ServerSettings.model_validate(model))) as model_url, \
            serve_on_loopback(create_reward_app(RewardSettings.model_validate(reward))) as reward_url:
        over_http = collect(specs, HttpServers(model_url, reward_url, timeout_s=client_timeout_s(model)))
    return in_process, over_http


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_timeout_then_retry_recovers_the_same_evidence_in_process_and_over_http():
    in_process, over_http = _collect_both_ways("fault-timeout-retried")
    for collected in (in_process, over_http):
        assert [c.status for c in collected] == ["completed", "completed"]
        attempts = {(c.index, call["turn_id"]): [a["outcome"] for a in call["attempts"]]
                    for c in collected for call in c.ground_truth["calls"] if len(call["attempts"]) > 1}
        assert attempts == {(0, 2): ["timeout", "ok"]}
        assert collected[0].ground_truth["calls"][1]["attempts"][0]["detail"] == "ReadTimeout: timed out"
    assert [c.artifact_digest() for c in in_process] == [c.artifact_digest() for c in over_http]


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_timeout_on_every_attempt_fails_the_rollout_in_process_and_over_http():
    in_process, over_http = _collect_both_ways("fault-timeout-gives-up")
    for collected in (in_process, over_http):
        assert [c.status for c in collected] == ["completed", "failed"]
        failure = collected[1].failure
        assert (failure["kind"], failure["turn_id"], failure["attempts"]) == ("timeout", 2, 3)
        assert failure["detail"] == "ReadTimeout: timed out (gave up after 3 attempt(s))"
        assert collected[1].result is None
    assert [c.artifact_digest() for c in in_process] == [c.artifact_digest() for c in over_http]
