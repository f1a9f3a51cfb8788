"""Collector thresholds: raised inside a block (nested and across threads), restored after, never lowered."""

from __future__ import annotations

import gc
import threading

import pytest

from compactsim.harness.core.gc_passes import THRESHOLDS, fewer_gc_passes, use_fewer_gc_passes


@pytest.fixture(autouse=True)
def _python_defaults():
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*before)


def test_a_block_raises_the_thresholds_and_the_last_one_out_restores_them():
    with fewer_gc_passes():
        assert gc.get_threshold() == THRESHOLDS
        with fewer_gc_passes():
            assert gc.get_threshold() == THRESHOLDS
        assert gc.get_threshold() == THRESHOLDS
    assert gc.get_threshold() == (700, 10, 10)


def test_an_exception_still_restores_them():
    with pytest.raises(RuntimeError), fewer_gc_passes():
        raise RuntimeError("boom")
    assert gc.get_threshold() == (700, 10, 10)


def test_overlapping_blocks_on_threads_restore_only_when_both_are_done():
    inside, release = threading.Event(), threading.Event()

    def worker():
        with fewer_gc_passes():
            inside.set()
            release.wait(10)

    t = threading.Thread(target=worker)
    t.start()
    inside.wait(10)
    with fewer_gc_passes():
        pass
    assert gc.get_threshold() == THRESHOLDS  # the thread's block is still open
    release.set()
    t.join(10)
    assert gc.get_threshold() == (700, 10, 10)


def test_thresholds_already_higher_or_switched_off_are_kept():
    gc.set_threshold(50_000, 10, 0)
    with fewer_gc_passes():
        assert gc.get_threshold() == (50_000, THRESHOLDS[1], 0)
    assert gc.get_threshold() == (50_000, 10, 0)
    use_fewer_gc_passes()
    assert gc.get_threshold() == (50_000, THRESHOLDS[1], 0)
