"""``memory.autocast=auto``: mixed precision where the machine runs bf16 natively and it measured faster, fp32
elsewhere.

A CPU with bf16 instructions (x86 ``avx512_bf16`` or ``amx_bf16``, Arm ``bf16``) multiplies bf16 matrices several
times faster than fp32 ones (a 2-core AMD EPYC Zen 4 here: 4.4x at 1024^3); one without them emulates bf16 through
fp32 conversions and is slower than plain fp32 (an AVX2-only EPYC). :func:`choose` reads the CPU's flags and, where
they promise bf16, times one matrix product of a training-like shape in both dtypes on the run's thread count; bf16
is chosen only when both say so. On a CUDA device the answer is the device's own (``torch.cuda.is_bf16_supported``).

The decision is made once, by ``corl-bench validate`` / ``run``'s resolution, and written into the resolved config
(``memory.autocast: bfloat16`` or ``off``) with the reason as a note, so a run directory says what ran and why.
"""

from __future__ import annotations

import platform
import time
from dataclasses import dataclass
from pathlib import Path

BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")
"""CPU flags (``/proc/cpuinfo``) that mean bf16 arithmetic in hardware: x86 AVX-512 BF16 and AMX, Arm BF16."""
MIN_GAIN = 1.3
"""bf16 is chosen only when its matrix product measured at least this many times faster than fp32's"""
SHAPE = (512, 1024, 2816)
"""(tokens, hidden, intermediate) of the timed product: a micro-batch through an MLP projection of a ~0.5B model"""


@dataclass(frozen=True)
class Choice:
    """What ``auto`` resolved to and why."""

    autocast: str
    """``bfloat16`` or ``off``"""
    reason: str
    flags: tuple[str, ...] = ()
    """the CPU's bf16 flags found (empty: none)"""
    speedup: float | None = None
    """bf16 over fp32 matrix-product rate, where it was measured"""


def _cpuinfo(keys: tuple[str, ...], cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    """The value of the first ``/proc/cpuinfo`` line whose key is one of ``keys``; None where there is none (or no
    such file: macOS, Windows)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in keys:
            return value.strip()
    return None


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The CPU's feature flags (x86 ``flags``, Arm ``Features``); empty where they cannot be read."""
    return set((_cpuinfo(("flags", "Features"), cpuinfo) or "").split())


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what :mod:`platform` knows."""
    return _cpuinfo(("model name",), cpuinfo) or platform.processor() or platform.machine()


def matmul_rate(dtype: str, shape: tuple[int, int, int] = SHAPE, seconds: float = 0.3) -> float:
    """Measured GFLOP/s of ``(m x k) @ (k x n)`` in ``dtype`` on this process's torch threads (the first product is
    a warm-up and not timed)."""
    import torch

    m, k, n = shape
    dt = getattr(torch, dtype)
    a, b = torch.randn(m, k).to(dt), torch.randn(n, k).to(dt)
    torch.nn.functional.linear(a, b)
    reps, t0 = 0, time.perf_counter()
    while True:
        torch.nn.functional.linear(a, b)
        reps += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds and reps >= 2:
            return 2.0 * m * k * n * reps / elapsed / 1e9


def choose(device: str = "cpu", *, flags: set[str] | None = None, threads: int = 0,
           measure: bool = True) -> Choice:
    """Resolve ``memory.autocast=auto`` for models on ``device`` (``cpu``, ``cuda``, ``cuda:N``, ``auto``).

    ``flags``: the CPU's flags (default: read them); ``threads``: torch threads for the timing (0: as set);
    ``measure=False`` trusts the flags alone (tests)."""
    import torch

    if device.startswith("cuda") or (device == "auto" and torch.cuda.is_available()):
        if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
            return Choice("bfloat16", "the GPU supports bf16")
        return Choice("off", "the GPU has no bf16 support")
    found = tuple(f for f in BF16_FLAGS if f in (cpu_flags() if flags is None else flags))
    if not found:
        return Choice("off", f"the CPU ({cpu_model()}) has no bf16 instructions ({' / '.join(BF16_FLAGS[:2])}): bf16 "
                      "would be emulated, slower than fp32")
    if not torch.backends.mkldnn.is_available():
        return Choice("off", "this PyTorch has no oneDNN (mkldnn), its bf16 matrix products take the slow "
                      "reference path", found)
    if not measure:
        return Choice("bfloat16", f"the CPU has {', '.join(found)}", found)
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        fp32, bf16 = matmul_rate("float32"), matmul_rate("bfloat16")
    finally:
        torch.set_num_threads(before)
    gain = bf16 / fp32
    where = f"the CPU has {', '.join(found)}; a {SHAPE[0]}x{SHAPE[1]}x{SHAPE[2]} product measured {bf16:.0f} " \
            f"GFLOP/s in bf16 against {fp32:.0f} in fp32 ({gain:.1f}x"
    if gain >= MIN_GAIN:
        return Choice("bfloat16", f"{where})", found, gain)
    return Choice("off", f"{where}, under the {MIN_GAIN}x that pays for the casts)", found, gain)


ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
"""the instruction-set flags a CPU timing depends on (recorded with every measurement)"""


def machine_facts() -> dict[str, object]:
    """What a CPU timing needs beside it: the CPU model, its instruction sets (AVX2 / AVX-512 / bf16 / AMX), cores,
    torch threads and the 1-minute load average."""
    import os

    import torch

    flags = cpu_flags()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {"cpu": cpu_model(), "isa": [f for f in ISA_FLAGS if f in flags], "cores": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "load_1min": load}
