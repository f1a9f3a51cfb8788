"""Keep freed heap memory mapped, so torch's large CPU buffers are not page-faulted in again.

glibc serves every allocation above its mmap threshold (128 KiB, raised dynamically up to
32 MiB) with a fresh `mmap` and gives it back with `munmap` when freed, and it trims the top of
the heap whenever more than the trim threshold (twice the mmap threshold) is free. The tiny
policy's attention matrices (heads × S × S float64, several MiB per layer at a few hundred
tokens) are allocated and freed on every forward and backward, so each one was faulted in page
by page again: about 5,000 minor faults and 10 ms of kernel time per training forward+backward
of 411 tokens. Serving them from the heap and not trimming it removes that; the bytes computed
are unchanged (torch still fills fresh memory under `use_deterministic_algorithms`).

Costs: a process keeps its peak heap (up to 1 GiB freed at the top before glibc trims) until it
exits, which is what a run wants; it applies to a backend under test in the same process too.
Not glibc (musl's mallopt does nothing, macOS has none): nothing happens.
"""

from __future__ import annotations

import ctypes
import functools

#: mallopt parameters from glibc's <malloc.h>.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: glibc's ceiling for M_MMAP_THRESHOLD on 64-bit (4 MiB × sizeof(long)); larger values are refused.
_MMAP_THRESHOLD = 32 << 20
_TRIM_THRESHOLD = 1 << 30


@functools.cache
def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds once per process; True when glibc accepted both."""
    try:  # the running process's own symbols: no `find_library` (it runs `ldconfig -p`, 12 ms)
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))


__all__ = ["keep_freed_memory"]
