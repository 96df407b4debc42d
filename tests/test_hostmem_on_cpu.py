"""memory.keep_host_memory (corl_bench.hostmem): inside the context glibc serves large blocks from the heap and keeps
them (no mmap per tensor), outside it the defaults are back; a run computes the same with it on and off."""

from __future__ import annotations

import ctypes

import pytest
import torch

from corl_bench.config import ConfigError, load_config
from corl_bench.hostmem import glibc, keep_host_memory

LIBC = glibc()
needs_glibc = pytest.mark.skipif(LIBC is None, reason="glibc only (musl and macOS: keep_host_memory does nothing)")


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                      "fsmblks", "uordblks", "fordblks", "keepcost")]


def _mmapped_bytes() -> int:
    fn = LIBC.mallinfo2
    fn.restype = _Mallinfo2
    return int(fn().hblkhd)


def _grows_mmapped(nbytes: int = 2 << 30) -> bool:
    """Whether a fresh ``nbytes`` tensor (never touched: no memory used) is served by its own mmap (glibc's default
    for large blocks). The default size is larger than any block an earlier test could have left in the heap."""
    before = _mmapped_bytes()
    t = torch.empty(nbytes // 4, dtype=torch.float32)
    grew = _mmapped_bytes() - before >= nbytes
    del t
    return grew


@needs_glibc
def test_large_blocks_come_from_the_heap_inside_and_from_mmap_after_on_cpu() -> None:
    """In a fresh process: the suite's own process may hold large free heap chunks from earlier in-process runs
    (that is what the setting does), which would serve the probe allocations without a mapping."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", "import tests.test_hostmem_on_cpu as t; t._check_in_this_process()"],
                         capture_output=True, text=True, cwd=str(__import__("pathlib").Path(__file__).parents[1]))
    assert out.returncode == 0, out.stderr[-2000:]


def _check_in_this_process() -> None:
    assert _grows_mmapped()  # the default: one mmap per large tensor
    with keep_host_memory(True) as active:
        assert active
        with keep_host_memory(True):  # nested: the outer one restores
            assert not _grows_mmapped(64 << 20)
        assert not _grows_mmapped(64 << 20)
        mapped = _mmapped_bytes()
        first = torch.empty(16 << 20)
        first.fill_(1.0)  # touched: the pages are the process's now
        del first
        again = torch.empty(16 << 20)  # the freed block is reused, no new mapping
        assert _mmapped_bytes() == mapped
        del again
    # the defaults are back: a block larger than anything the heap kept gets its own mapping again
    assert _grows_mmapped()


def test_disabled_is_a_no_op_on_cpu() -> None:
    with keep_host_memory(False) as active:
        assert not active


def test_config_field_validates_on_cpu() -> None:
    assert load_config(None, []).memory.keep_host_memory is True
    assert load_config(None, ["memory.keep_host_memory=false"]).memory.keep_host_memory is False
    with pytest.raises(ConfigError):
        load_config(None, ["memory.keep_host_memory=sometimes"])
