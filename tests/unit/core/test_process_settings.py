"""`configure_determinism`'s process-wide settings, each checked in a fresh interpreter, and the
attention-score shortcut the tiny policy takes when √head_size is a power of two."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import pytest
import torch

from compactsim.harness.core.policy import _attention_scores


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_configure_determinism_sets_deterministic_warn_only_one_thread_without_importing_inductor():
    out = _run("""
        import os, sys
        os.environ.pop("TORCHINDUCTOR_DETERMINISTIC", None)
        from compactsim.harness.core.policy import configure_determinism
        import torch
        configure_determinism()
        print(torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
              torch.get_num_threads(), "torch._inductor" in sys.modules, os.environ["TORCHINDUCTOR_DETERMINISTIC"])
        import torch._inductor.config as inductor_config
        print(inductor_config.deterministic)
    """)
    assert out.splitlines() == ["True True 1 False 1", "True"]


def test_numpy_blas_runs_the_thread_count_torch_does():
    """Sampling runs in numpy: its BLAS (a thread per core by default) is held to the same count."""
    out = _run("""
        import numpy, threadpoolctl
        from compactsim.harness.core.policy import configure_determinism
        blas = lambda: sorted({p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"})
        configure_determinism()
        print(blas())
        configure_determinism(num_threads=2)
        print(blas())
    """)
    assert out.splitlines() == ["[1]", "[2]"]


def test_an_inductor_imported_before_gets_its_deterministic_flag_set():
    out = _run("""
        import os
        os.environ.pop("TORCHINDUCTOR_DETERMINISTIC", None)
        import torch._inductor.config as inductor_config
        before = inductor_config.deterministic
        from compactsim.harness.core.policy import configure_determinism
        configure_determinism()
        print(before, inductor_config.deterministic)
    """)
    assert out == "False True"


_HEAP = """
    import ctypes, sys, torch
    from compactsim.harness.core.allocator import keep_freed_memory

    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                  "fsmblks", "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = MallInfo2
    print(keep_freed_memory() if sys.argv[1] == "keep" else "no")
    before = libc.mallinfo2()
    buffers = [torch.ones(5 << 17, dtype=torch.float64) for _ in range(8)]  # 8 x 5 MiB, like attention matrices
    held = libc.mallinfo2()
    del buffers
    freed = libc.mallinfo2()
    print(held.hblkhd - before.hblkhd, freed.arena - held.arena, freed.fordblks)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt thresholds and mallinfo2 are glibc's")
def test_large_buffers_come_from_the_heap_and_stay_there_when_freed():
    """glibc's defaults map each 5 MiB buffer with its own mmap (and unmap it when freed: every reuse
    faults its pages in again); with `keep_freed_memory` they come from the heap, which keeps them."""
    def run(arg: str) -> tuple[str, list[int]]:
        done = subprocess.run([sys.executable, "-c", textwrap.dedent(_HEAP), arg], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        asked, numbers = done.stdout.splitlines()
        return asked, [int(x) for x in numbers.split()]

    asked, (mapped, arena_change, free_in_heap) = run("keep")
    if asked != "True":
        pytest.skip("this libc is not glibc (or refused the thresholds)")
    assert (mapped, arena_change) == (0, 0)
    assert free_in_heap >= 40 << 20  # the 40 MiB freed stay in the heap for the next pass
    _, (mapped_by_default, _, _) = run("default")
    assert mapped_by_default >= 40 << 20  # the check can fail: by default each buffer is its own mapping


@pytest.mark.parametrize("head_size", [16, 4, 64, 32, 12])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_attention_scores_are_the_plain_formula_bit_for_bit_forward_and_backward(head_size: int, dtype: torch.dtype):
    g = torch.Generator().manual_seed(head_size)
    q0 = torch.randn(2, 3, 37, head_size, generator=g, dtype=torch.float64).to(dtype) * 3
    k0 = torch.randn(2, 3, 41, head_size, generator=g, dtype=torch.float64).to(dtype) * 3
    weight = torch.randn(2, 3, 37, 41, generator=g, dtype=torch.float64).to(dtype)
    results = []
    for fast in (True, False):
        q, k = q0.clone().requires_grad_(), k0.clone().requires_grad_()
        att = _attention_scores(q, k, head_size) if fast else (q @ k.transpose(-2, -1)) / math.sqrt(head_size)
        (att * weight).sum().backward()
        results.append((att.detach(), q.grad, k.grad))
    for fast, plain in zip(*results):
        assert torch.equal(fast, plain)
