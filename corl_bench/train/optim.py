"""AdamW whose CPU step runs block by block: torch's own arithmetic, bit for bit, at a fraction of the time.

``torch.optim.AdamW`` on a CPU (``foreach`` and ``fused`` off, the default there) updates each parameter with seven
elementwise operations over the whole tensor — ``lerp_``, ``mul_``, ``addcmul_``, ``sqrt``, ``/``, ``add_``,
``addcdiv_`` — and allocates two temporaries of the tensor's size (``sqrt``'s and the division's). For a real model
that is memory traffic, not arithmetic: Gemma-3-270M's embedding alone is 168 M floats, so each of those passes
streams 0.7 GB through memory and each temporary is a fresh 0.7 GB allocation that page-faults. :class:`BlockAdamW`
runs the same seven operations on one block of each tensor at a time (about 256 K floats, 1 MB, so the operands stay
in the cache between the operations) and is otherwise ``torch.optim.AdamW``: same state (``step``, ``exp_avg``,
``exp_avg_sq``), same ``state_dict``, the same group options.

Bit-identical, not merely close: every element goes through the same kernels with the same operands. The one thing
that could differ is whether an element is handled by a kernel's vector loop or its scalar remainder loop (they may
round differently); torch's elementwise loop runs from the start of each thread's range in steps of two vectors and
handles the range's last few elements with the scalar loop. So the blocks here are cut where that does not move:
inside each of the ranges torch's own split gives the whole tensor (``at::parallel_for``: ``GRAIN`` elements at
least per thread, ``ceil(n / threads)`` each), at offsets that are multiples of :data:`ALIGN`, and a block that torch
splits again between threads splits into pieces that are multiples of :data:`ALIGN` too; only the last block of a
range ends where the range ends. ``fused=True`` (a different kernel) is not bit-identical and not used.

Anything else — parameters off the CPU, sparse or non-contiguous tensors, tensor subclasses (FSDP's DTensor), AMSGrad,
``maximize``, ``capturable``, ``differentiable``, ``foreach`` or ``fused`` asked for, a tensor learning rate — takes
``torch.optim.AdamW``'s own step.

Measured: ``python scripts/bench_adamw.py`` (the Co-RL real-study cohort's two models, SmolLM2-135M and
Gemma-3-270M shapes, 405 M parameters).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch

GRAIN = 32768  # at::internal::GRAIN_SIZE: an elementwise op below this many elements runs on one thread
ALIGN = 64  # a multiple of two vectors of floats on every CPU ISA torch vectorises for (AVX2 16, AVX-512 32)
TARGET_BLOCK = 8 * GRAIN  # 256 K floats = 1 MB per operand: measured fastest here (bench_adamw.py)


def torch_split(n: int, threads: int) -> list[tuple[int, int]]:
    """The thread ranges ``at::parallel_for`` gives one elementwise op over ``n`` elements (OpenMP backend)."""
    if n < GRAIN or threads <= 1:
        return [(0, n)]
    parts = min(threads, -(-n // GRAIN))
    size = -(-n // parts)
    return [(b, min(n, b + size)) for b in range(0, n, size)]


def _clean(size: int, threads: int, last: bool) -> bool:
    """Whether an op over ``size`` elements puts its scalar remainders only where a larger op would: every thread
    range a multiple of ALIGN (``last``: except the final range, whose remainder ends where the larger range ends)."""
    ranges = torch_split(size, threads)
    whole = ranges if not last else ranges[:-1]
    return all((b - a) % ALIGN == 0 for a, b in whole)


@functools.lru_cache(maxsize=None)
def _pieces(n: int, threads: int) -> tuple[tuple[int, int], ...]:
    """Block boundaries over ``n`` elements: inside torch's thread ranges, each block clean (:func:`_clean`)."""
    out = []
    for lo, hi in torch_split(n, threads):
        pos = lo
        while pos < hi:
            rest = hi - pos
            if rest <= TARGET_BLOCK and _clean(rest, threads, last=True):
                out.append((pos, hi))
                break
            size = min(TARGET_BLOCK, rest - rest % ALIGN)
            while not _clean(size, threads, last=False):  # ends: any multiple of ALIGN below GRAIN is clean
                size -= ALIGN
            out.append((pos, pos + size))
            pos += size
    return tuple(out)


def blocks(n: int, threads: int) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` of the blocks a tensor of ``n`` elements is updated in, in order (they tile ``[0, n)``)."""
    yield from _pieces(n, threads)


def _plain(t: torch.Tensor | None) -> bool:
    return t is not None and type(t) is torch.Tensor and t.device.type == "cpu" and t.layout == torch.strided \
        and t.is_contiguous()


class BlockAdamW(torch.optim.AdamW):
    """``torch.optim.AdamW`` (same arguments, state and ``state_dict``) whose CPU step runs block by block; see the
    module docstring for why it is bit-identical to ``torch.optim.AdamW(..., foreach=False)``."""

    def _eligible(self, group: dict[str, Any]) -> bool:
        if group["amsgrad"] or group["maximize"] or group.get("capturable") or group.get("differentiable") \
                or group.get("foreach") or group.get("fused") or isinstance(group["lr"], torch.Tensor):
            return False
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state.get(p, {})
            if not (_plain(p.data) and _plain(p.grad) and p.grad.dtype == p.dtype
                    and all(_plain(state[k]) for k in ("exp_avg", "exp_avg_sq") if k in state)) \
                    or torch.is_complex(p):
                return False
        return True

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        if not all(self._eligible(g) for g in self.param_groups):
            return super().step(closure)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        threads = torch.get_num_threads()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self._update(p, group, threads)
        return loss

    def _update(self, p: torch.Tensor, group: dict[str, Any], threads: int) -> None:
        """One parameter's AdamW update: torch's ``_single_tensor_adam`` (not capturable), one block at a time."""
        state = self.state[p]
        if len(state) == 0:  # torch.optim.AdamW's own lazy state
            state["step"] = torch.tensor(0.0, dtype=torch.float64 if torch.get_default_dtype() == torch.float64
                                         else torch.float32)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        state["step"] += 1
        step = state["step"].item()
        lr, (beta1, beta2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        step_size = lr / bias_correction1
        bias_correction2_sqrt = bias_correction2 ** 0.5
        flat = [t.view(-1) for t in (p.data, p.grad, state["exp_avg"], state["exp_avg_sq"])]
        for lo, hi in blocks(flat[0].numel(), threads):
            param, grad, exp_avg, exp_avg_sq = (t[lo:hi] for t in flat)
            if wd != 0:
                param.mul_(1 - lr * wd)
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
            param.addcdiv_(exp_avg, denom, value=-step_size)
