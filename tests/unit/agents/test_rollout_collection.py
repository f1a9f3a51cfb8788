"""Collection runs agent + reward + emitters; results are identical for any worker count and in input order."""

from __future__ import annotations

import json
import os

import pytest

from compactsim.agents.collect import (
    InProcessServers,
    LocalExecutor,
    ProcessExecutor,
    collect,
    make_executor,
    run_rollout,
    server_script,
)
from compactsim.harness.core.errors import ConfigError
from compactsim.harness.core.contract import RunResult


def _servers(specs, **model):
    return InProcessServers({"seed": 0, "script": server_script(specs), **model},
                            {"rule": {"kind": "pattern", "pattern": [1.0, 0.0]}, "mask_sample_indices": [1]})


def _group(spec_for, n=4, **kwargs):
    return [spec_for(rollout_id=f"rollout-{i}", rollout_index=i, seed=i, **kwargs) for i in range(n)]


def test_collect_returns_results_with_rewards_and_mask_flags_in_input_order(spec_for):
    specs = _group(spec_for, turns=3)
    out = collect(specs, _servers(specs), executor=LocalExecutor(2))
    assert [c.rollout_id for c in out] == [s.rollout_id for s in specs]
    assert [c.result["reward"] for c in out] == [1.0, 0.0, 1.0, 0.0]
    assert [c.result.get("instance_config") for c in out] == [None, {"mask_sample": True}, None, None]
    assert [c.ground_truth["outcome"]["reward"] for c in out] == [1.0, 0.0, 1.0, 0.0]
    for c in out:
        RunResult.model_validate(c.result)


def test_results_are_byte_identical_for_any_worker_count(spec_for):
    specs = _group(spec_for, n=6, turns=4)
    runs = [collect(specs, _servers(specs), executor=LocalExecutor(w)) for w in (1, 3)]
    dumps = [[json.dumps([c.result, c.ground_truth], sort_keys=True) for c in run] for run in runs]
    assert dumps[0] == dumps[1]
    assert [c.artifact_digest() for c in runs[0]] == [c.artifact_digest() for c in runs[1]]


def test_failed_rollouts_are_reported_without_a_result(spec_for):
    specs = _group(spec_for, n=2, turns=3)
    faults = [{"kind": "http_503", "rollout_id": "rollout-1", "turn": 2}]
    out = collect(specs, _servers(specs, faults=faults))
    assert [c.status for c in out] == ["completed", "failed"]
    assert out[1].result is None
    assert out[1].failure["kind"] == "server_unavailable"


def test_timings_split_the_rollout_into_server_agent_and_emitter(mock_model, spec_for):
    spec = spec_for(turns=3)
    with mock_model([spec]) as client:
        collected = run_rollout(spec, model_client=client)
    t = collected.timings
    assert t.server_s > 0 and t.agent_s >= 0 and t.emitter_s > 0
    assert collected.result["reward"] is None  # no reward server: no reward


def test_duplicate_rollout_ids_are_rejected(spec_for):
    spec = spec_for()
    with pytest.raises(ValueError, match="rollout ids must be unique"):
        collect([spec, spec], _servers([spec]))
    with pytest.raises(ValueError, match="duplicate rollout_id 'rollout-0'"):
        server_script([spec, spec])


def test_unknown_executor_and_bad_worker_counts_are_rejected(spec_for):
    with pytest.raises(ValueError, match="executor='dask'"):
        make_executor("dask", 2)  # type: ignore[arg-type]
    specs = _group(spec_for, n=1)
    with pytest.raises(ValueError, match="workers=0"):
        collect(specs, _servers(specs), executor=LocalExecutor(0))


def test_worker_processes_give_the_threads_results_and_are_kept_inside_a_with_block(spec_for):
    specs = _group(spec_for, n=5, turns=3)
    local = collect(specs, _servers(specs), executor=LocalExecutor(1))
    with ProcessExecutor(2) as executor:
        first = collect(specs, _servers(specs), executor=executor)
        pool = executor._pool
        second = collect(specs[:3], _servers(specs[:3]), executor=executor)
        assert pool is not None and executor._pool is pool  # one start-up for both collections
    assert executor._pool is None
    assert [c.artifact_digest() for c in first] == [c.artifact_digest() for c in local]
    assert [c.index for c in first] == list(range(5))
    assert [c.artifact_digest() for c in second] == [c.artifact_digest() for c in local[:3]]
    assert isinstance(make_executor("processes", 2), ProcessExecutor)


class _DyingServers:
    """Servers whose worker exits at once (as a killed or out-of-memory worker would)."""

    def open(self):
        os._exit(3)


def test_a_dead_worker_process_is_a_typed_error_and_the_bare_executor_stops_its_processes(spec_for):
    specs = _group(spec_for, n=2)
    executor = ProcessExecutor(2)
    with pytest.raises(ConfigError) as info:
        collect(specs, _DyingServers(), executor=executor)
    assert info.value.code == "worker_failed"
    assert executor._pool is None


class _Refused(Exception):
    """An exception whose constructor does not match its pickled arguments (it cannot be unpickled)."""

    def __init__(self, rule, detail):
        super().__init__(detail)


class _RefusingServers:
    def __init__(self, error: str) -> None:
        self.error = error

    def open(self):
        raise _Refused("rule", "server refused") if self.error == "odd" else ValueError("no servers here")


def test_a_worker_error_reaches_the_caller_as_itself_or_typed_when_it_cannot_be_unpickled(spec_for):
    specs = _group(spec_for, n=2)
    with ProcessExecutor(2) as executor:
        with pytest.raises(ValueError, match="no servers here") as plain:
            collect(specs, _RefusingServers("plain"), executor=executor)
        assert plain.type is ValueError  # as itself, not wrapped
        with pytest.raises(ConfigError) as info:
            collect(specs, _RefusingServers("odd"), executor=executor)
    assert info.value.code == "worker_failed" and "_Refused: server refused" in info.value.detail
