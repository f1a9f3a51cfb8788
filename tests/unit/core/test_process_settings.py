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


_FAULTS = """
    import resource, sys, torch
    from compactsim.harness.core.allocator import keep_freed_memory
    from compactsim.harness.core.policy import TinyPolicy
    print(keep_freed_memory() if sys.argv[1] == "keep" else "no")
    model = TinyPolicy.from_seed(0, dtype=torch.float64)
    ids = torch.randint(40, 280, (1, 300), generator=torch.Generator().manual_seed(0))
    def faults():
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(5):
            model.token_logprobs(ids).sum().backward()
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    faults()  # the first pass faults its buffers in
    print(faults())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt thresholds are glibc's")
def test_training_passes_reuse_freed_buffers_instead_of_faulting_them_in_again():
    """Without the thresholds glibc trims the freed activations after every backward (about 4,000
    page faults per pass at 300 tokens); with them, steady-state passes reuse the heap."""
    def run(arg: str) -> tuple[str, int]:
        done = subprocess.run([sys.executable, "-c", textwrap.dedent(_FAULTS), arg], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        asked, faults = done.stdout.split()
        return asked, int(faults)

    asked, kept = run("keep")
    if asked != "True":
        pytest.skip("this libc is not glibc (or refused the thresholds)")
    default = run("default")[1]
    assert default > 5000  # the comparison means something: the default allocator does fault
    assert kept * 10 < default  # a heap that grows past its earlier peak may still fault a little


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
