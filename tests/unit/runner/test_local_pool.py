"""The local executor's worker processes: results in payload order, longest first, a dead worker is typed."""

from __future__ import annotations

import json
import os
import time

import pytest

from compactsim.harness.core.errors import ConfigError
from compactsim.harness.local_pool import cost_hint, run_in_processes


def _square_with_pid(x: int) -> tuple[int, int]:
    return x * x, os.getpid()


def _die_on(x: int) -> int:
    if x == 2:
        os._exit(9)  # a worker killed mid-item (OOM killer, segfault): no exception crosses back
    return x


def test_results_come_back_in_payload_order_from_other_processes() -> None:
    done: list[int] = []
    out = run_in_processes(_square_with_pid, [(k,) for k in range(6)], workers=2, costs=[1, 9, 1, 9, 1, 9],
                           on_done=lambda k, _r: done.append(k))
    assert [v for v, _pid in out] == [0, 1, 4, 9, 16, 25]
    assert os.getpid() not in {pid for _v, pid in out}  # none ran here
    assert sorted(done) == list(range(6))


def _started_at(_k: int) -> int:
    return time.monotonic_ns()  # one system-wide clock on Linux: comparable across processes


def test_costly_items_are_handed_out_first() -> None:
    """One worker runs items in submission order: by cost, descending, ties in payload order."""
    started = run_in_processes(_started_at, [(k,) for k in range(6)], workers=1, costs=[1, 9, 1, 9, 1, 9])
    assert sorted(range(6), key=lambda k: started[k]) == [1, 3, 5, 0, 2, 4]


def test_a_worker_that_dies_is_a_typed_error_naming_its_item() -> None:
    with pytest.raises(ConfigError) as info:
        run_in_processes(_die_on, [(k,) for k in range(4)], workers=1)
    assert info.value.code == "worker_failed"
    unfinished = json.loads(info.value.detail.split("items ")[1].split(" unfinished")[0])
    assert 2 in unfinished
    assert "--parallel 1" in info.value.detail


def test_cost_hint_is_steps_times_rollouts() -> None:
    class S:
        steps, groups, group_size = 20, 2, 4

    assert cost_hint(S()) == 160
    assert cost_hint(object()) == 1


def _fail_fast_or_sleep(x: int) -> int:
    if x == 0:
        raise RuntimeError("boom")
    time.sleep(3.0)
    return x


def _none(_x: int) -> None:
    return None


def test_a_failing_item_is_typed_and_does_not_wait_for_the_queue() -> None:
    start = time.monotonic()
    with pytest.raises(ConfigError) as info:
        run_in_processes(_fail_fast_or_sleep, [(k,) for k in range(7)], workers=2, costs=[9, 1, 1, 1, 1, 1, 1])
    assert info.value.code == "worker_failed"
    assert "item 0 failed in its worker: RuntimeError: boom" in info.value.detail
    assert time.monotonic() - start < 6.0  # not the 9 s the queued sleeps would take


def test_none_results_keep_their_places() -> None:
    assert run_in_processes(_none, [(k,) for k in range(3)], workers=2) == [None, None, None]


def test_without_worker_processes_the_items_run_here(monkeypatch: pytest.MonkeyPatch) -> None:
    import compactsim.harness.local_pool as local_pool

    def no_semaphores(*_a: object, **_k: object) -> None:
        raise OSError(38, "Function not implemented")  # what sem_open says without /dev/shm

    monkeypatch.setattr(local_pool, "ProcessPoolExecutor", no_semaphores)
    done: list[int] = []
    out = run_in_processes(_square_with_pid, [(k,) for k in range(3)], workers=2, on_done=lambda k, _r: done.append(k))
    assert [v for v, _pid in out] == [0, 1, 4] and {pid for _v, pid in out} == {os.getpid()}
    assert done == [0, 1, 2]


def _sleep_long(x: int) -> int:
    if x:
        time.sleep(60.0)
    return x


def test_a_run_ended_from_outside_stops_its_workers_instead_of_waiting_for_their_items() -> None:
    """A SIGTERM's SystemExit (here: raised from `on_done`) used to leave the running items to finish: 8-16 s."""
    import multiprocessing

    others = set(multiprocessing.active_children())

    def stop(_k: int, _r: int) -> None:
        raise SystemExit(143)

    start = time.monotonic()
    with pytest.raises(SystemExit):
        run_in_processes(_sleep_long, [(0,), (1,)], workers=2, costs=[1, 9], on_done=stop)
    deadline = time.monotonic() + 10.0
    while set(multiprocessing.active_children()) - others and time.monotonic() < deadline:
        time.sleep(0.05)
    assert set(multiprocessing.active_children()) - others == set()
    assert time.monotonic() - start < 20.0  # not the 60 s the running item would take
