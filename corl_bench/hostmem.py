"""Host (CPU) memory kept for reuse (``memory.keep_host_memory``).

A training step on the CPU allocates the same large tensors every step: the (N, T, V) logits, their log-softmax and
its gradient, the activations of every layer. glibc's ``malloc`` serves each block above its mmap threshold (at
most 32 MiB) with a fresh ``mmap`` and gives it back with ``munmap`` when the tensor dies, so every step faults
every page of those tensors in again and the kernel zeroes them: on SmolLM2-135M at 8 x 4 x 128 the elementwise
passes over the logits ran 5-8x under memory bandwidth and a third of the step was system time
(``scripts/bench_suite.py --rows step-smol``). PyTorch's CUDA caching allocator keeps freed blocks for reuse; the
CPU allocator has no cache and leaves it to the C library.

:func:`keep_host_memory` tells glibc to keep what is freed: no ``mmap`` for large blocks (``M_MMAP_MAX`` 0, so
they come from the heap) and no trimming of the heap (``M_TRIM_THRESHOLD`` -1). After the first steps the heap
holds the step's working set and allocations stop faulting. What it costs: the process keeps its peak memory (plus
the heap's fragmentation: up to a second copy of a training step's transient memory, which the estimate counts,
:data:`corl_bench.hf.fit.KEPT_HEAP`) until the context ends, which restores glibc's defaults and returns the free memory
(``malloc_trim``). Nothing computed changes. On a C library other than glibc (musl, macOS) it does nothing.

Intel's PyTorch CPU tuning guide reaches the same end by preloading jemalloc or tcmalloc; this needs no library and
no restart.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import sys
from typing import Any, Iterator

log = logging.getLogger(__name__)

__all__ = ["glibc", "keep_for_process", "keep_host_memory"]

# glibc <malloc.h>
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
_DEFAULT_TRIM_THRESHOLD, _DEFAULT_MMAP_MAX = 128 * 1024, 65536
_state = {"depth": 0}


def glibc() -> Any | None:
    """The process's glibc (``ctypes``), or None on any other C library."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version.restype = ctypes.c_char_p
        libc.gnu_get_libc_version()
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        return libc
    except (OSError, AttributeError):
        return None


@contextlib.contextmanager
def keep_host_memory(enabled: bool = True) -> Iterator[bool]:
    """Inside the context, freed host memory stays in the process for reuse (module docstring); yields whether it
    took effect (False when ``enabled`` is False or the C library is not glibc). Nested contexts are allowed: the
    outermost one restores glibc's defaults (its dynamic mmap threshold stays where it was)."""
    libc = glibc() if enabled else None
    if libc is None:
        yield False
        return
    if _state["depth"] == 0:
        libc.mallopt(_M_MMAP_MAX, 0)
        libc.mallopt(_M_TRIM_THRESHOLD, -1)
        log.debug("host memory: freed blocks are kept for reuse (glibc M_MMAP_MAX=0, M_TRIM_THRESHOLD=-1)")
    _state["depth"] += 1
    try:
        yield True
    finally:
        _state["depth"] -= 1
        if _state["depth"] == 0:
            libc.mallopt(_M_MMAP_MAX, _DEFAULT_MMAP_MAX)
            libc.mallopt(_M_TRIM_THRESHOLD, _DEFAULT_TRIM_THRESHOLD)
            libc.malloc_trim(0)


def keep_for_process(enabled: bool = True) -> bool:
    """:func:`keep_host_memory` for the rest of a process that exists only to run an agent (a Ray actor, a rank of a
    sharded agent); returns whether it took effect."""
    ctx = keep_host_memory(enabled)
    return ctx.__enter__()
