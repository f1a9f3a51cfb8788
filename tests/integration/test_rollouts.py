"""Scripted rollouts end to end: agent ↔ mock server ↔ emitters ↔ planner, every preset and flavour."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from compactsim.agents import InProcessServers, LocalExecutor, PRESETS, RetryPolicy, RolloutScript, RolloutSpec, collect, policy_preset
from compactsim.agents.collect import HttpServers, server_script
from compactsim.agents.rollout.script import scripted_turns
from compactsim.harness.core import tokenizer as tok
from compactsim.harness.core.errors import ContractError
from compactsim.harness.pipeline.planner import plan_rollout

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")

FLAVOURS = ("gym-0.7.0-transport", "gym-0.7.0-full", "gym-pr2870", "osworld", "none")


def _spec(preset: str, flavour: str, *, index: int = 0, turns: int = 6, **script) -> RolloutSpec:
    return RolloutSpec(
        rollout_id=f"{preset}/{flavour}/{index}", group_id=preset, task_id="task", rollout_index=index, seed=11 + index,
        script=RolloutScript(turns=scripted_turns(11, turns=turns, **script)), context_history=policy_preset(preset),
        flavour=flavour,  # type: ignore[arg-type]
    )


@pytest.fixture(scope="module")
def collected():
    specs = [_spec(p, f) for p in PRESETS for f in FLAVOURS]
    servers = InProcessServers({"seed": 11, "script": server_script(specs)}, {"rule": {"kind": "fixed", "value": 1.0}})
    return {c.rollout_id: c for c in collect(specs, servers, executor=LocalExecutor(2))}


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("flavour", FLAVOURS[:4])
def test_contract_flavours_plan_exactly_as_the_ground_truth_declares(collected, preset, flavour):
    c = collected[f"{preset}/{flavour}/0"]
    assert c.status == "completed"
    plan = plan_rollout(c.result)
    segments = c.ground_truth["expected"]["segments_declared"]
    assert [t.to_json() for t in plan.traces] == [
        {k: s[k] for k in ("trace_id", "turn_ids", "media_ids", "start_reason", "num_tokens", "num_sampled_tokens")}
        for s in segments
    ]


@pytest.mark.parametrize("preset", PRESETS)
def test_no_contract_flavour_is_single_trace_only_without_compaction(collected, preset):
    c = collected[f"{preset}/none/0"]
    expected = c.ground_truth["expected"]
    if expected["single_trace_ok"]:
        assert preset == "identity"
        assert [list(t.turn_ids) for t in plan_rollout(c.result).traces] == [[1, 2, 3, 4, 5, 6]]
    else:
        with pytest.raises(ContractError) as exc:
            plan_rollout(c.result)
        assert (exc.value.code, exc.value.turn_id) == ("undeclared_discontinuity", expected["first_discontinuity"]["turn_id"])


@pytest.mark.parametrize("preset", ["recency-images-k1", "recency-images-k2", "recency-images-k2-chunked3", "summary-at3-at5"])
def test_a_new_trace_prompt_carries_all_retained_images(collected, preset):
    gt = collected[f"{preset}/gym-0.7.0-transport/0"].ground_truth
    calls = {c["turn_id"]: c for c in gt["calls"]}
    for segment in gt["expected"]["segments_declared"]:
        first = calls[segment["start_turn"]]
        prompt = first["received"]["prompt_token_ids"]
        assert prompt.count(tok.IMAGE) == tok.IMAGE_PATCH_TOKENS * len(first["sent"]["media_ids"])
        last = calls[segment["turn_ids"][-1]]
        assert segment["media_ids"] == last["sent"]["media_ids"]
        assert first["sent"]["media_ids"] == last["sent"]["media_ids"][: len(first["sent"]["media_ids"])]


@pytest.mark.parametrize("pattern", ["repeated", "reordered"])
def test_repeated_and_reordered_images_keep_occurrence_order(pattern):
    spec = _spec("recency-images-k2", "gym-0.7.0-transport", turns=5, image_pattern=pattern, images_per_observation=2)
    (c,) = collect([spec], InProcessServers({"seed": 11, "script": server_script([spec])}))
    response = c.result["response"]
    for meta in response["model_call_metadata"]:
        ordinals = [o["occurrence_ordinal"] for o in meta["media_occurrences"]]
        assert ordinals == [meta["media_ids"][:i].count(m) for i, m in enumerate(meta["media_ids"])]
    assert len(response["media_assets"]) == 2  # two distinct screens, shown over and over
    plan = plan_rollout(c.result)
    assert [list(t.turn_ids) for t in plan.traces] == [s["turn_ids"] for s in c.ground_truth["expected"]["segments_declared"]]


def test_group_where_only_some_rollouts_compact_gives_uneven_trace_counts():
    specs = [_spec("recency-images-k2", "gym-0.7.0-transport", index=i, turns=t) for i, t in enumerate((3, 6))]
    out = collect(specs, InProcessServers({"seed": 11, "script": server_script(specs)}))
    assert [len(plan_rollout(c.result).traces) for c in out] == [1, 4]


# ------------------------------------------------------------------------------------------ real sockets


@pytest.fixture
def live_model_server() -> Iterator[callable]:
    """Start the mock model server on 127.0.0.1 (free port) in a thread; yields `start(settings) -> url`."""
    import uvicorn

    from compactsim.mock_servers.model_server import ServerSettings, create_app

    servers: list[tuple[uvicorn.Server, threading.Thread]] = []

    def start(settings: dict) -> str:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.close()
        config = uvicorn.Config(create_app(ServerSettings.model_validate(settings)), host="127.0.0.1", port=port,
                                log_level="error", access_log=False)
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.started, "mock server did not start"
        servers.append((server, thread))
        return f"http://127.0.0.1:{port}"

    yield start
    for server, thread in servers:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_stalled_server_ends_in_a_timeout_failure_not_a_hang(live_model_server):
    spec = _spec("recency-images-k2", "gym-0.7.0-transport", turns=3)
    url = live_model_server({"seed": 11, "script": server_script([spec]),
                             "faults": [{"kind": "timeout", "turn": 2, "delay_s": 2.0}]})
    start = time.monotonic()
    (c,) = collect([spec], HttpServers(url, timeout_s=0.3), retry=RetryPolicy(max_attempts=2))
    assert time.monotonic() - start < 10
    failure = c.ground_truth["outcome"]["failure"]
    assert (c.status, failure["kind"], failure["turn_id"], failure["attempts"]) == ("failed", "timeout", 2, 2)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_dropped_connection_over_a_socket_is_a_connection_failure(live_model_server):
    spec = _spec("identity", "gym-0.7.0-transport", turns=3)
    url = live_model_server({"seed": 11, "script": server_script([spec]), "faults": [{"kind": "drop_connection", "turn": 2}]})
    (c,) = collect([spec], HttpServers(url, timeout_s=5.0), retry=RetryPolicy(max_attempts=2))
    failure = c.ground_truth["outcome"]["failure"]
    assert (failure["kind"], failure["turn_id"], failure["attempts"]) == ("connection", 2, 2)


def test_dropped_connection_in_process_is_the_same_connection_failure_as_over_a_socket():
    """The in-process transport turns an answer left incomplete into the client's RemoteProtocolError, as a socket
    does, instead of httpx's in-process AssertionError (which ended the whole scenario as a harness error)."""
    spec = _spec("identity", "gym-0.7.0-transport", turns=3)
    model = {"seed": 11, "script": server_script([spec]), "faults": [{"kind": "drop_connection", "turn": 2}]}
    (c,) = collect([spec], InProcessServers(model), retry=RetryPolicy(max_attempts=2))
    failure = c.ground_truth["outcome"]["failure"]
    assert (failure["kind"], failure["turn_id"], failure["attempts"]) == ("connection", 2, 2)
    assert "RemoteProtocolError: peer closed connection without sending complete message body" in failure["detail"]


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_http_and_in_process_servers_give_identical_results(live_model_server):
    specs = [_spec("recency-images-k2", "gym-0.7.0-transport", index=i, turns=4) for i in range(2)]
    model = {"seed": 11, "script": server_script(specs)}
    over_http = collect(specs, HttpServers(live_model_server(model)))
    in_process = collect(specs, InProcessServers(model))
    assert [c.artifact_digest() for c in over_http] == [c.artifact_digest() for c in in_process]
