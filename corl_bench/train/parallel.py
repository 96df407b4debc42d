"""``run.backend=auto``: the agents of a cohort in parallel processes when that is faster on this machine.

With ``run.backend=ray`` every agent is a Ray actor with its own cores, and a cohort's agents roll out, score, update
and are evaluated at the same time (:mod:`corl_bench.train.actors`); with ``local`` they take turns in one process on
all cores. Which is faster depends on two things, both read here before the run starts:

* **How well one agent uses the cores** (thread scaling): the fp32 matrix-product rate on all ``c`` cores against
  the rate on ``c // n`` cores (:func:`corl_bench.train.precision.matmul_rate`, about a second), averaged over a
  decode step's shape and a training pass's (:data:`SHAPES`): a cell spends about half its time in each.
* **How large and how balanced the agents are**: each agent's weights per token (the profile's
  ``compute_weights``). In parallel the step waits for the largest; an agent under :data:`MIN_WEIGHTS` has too
  little work a step to pay for the calls between processes, and a profile that does not give the sizes keeps
  ``local``.

The predicted gain of parallel over turns is ``n * rate(c // n) / rate(c) * sum(w) / (n * max(w))``; ``auto`` picks
``ray`` (``run.cpus_per_agent = c // n`` unless set) when it is at least :data:`MIN_GAIN`, else ``local``.
Measured on a 2-core AMD EPYC (Zen 4, AVX-512; ``scripts/cell_speed.py``, one thread per agent against two in
turn, results/bench/parallel-agents-*.json): the real study's cell with two SmolLM2-135M (predicted 1.08-1.18x)
ran 1.00x (396 s and 395 s: rollouts 1.5x faster in parallel, the training passes slower); shortened to 3 steps and
60 problems a suite 1.14x; SmolLM2-135M x Gemma-3-270M (predicted 0.83-0.88x) 0.67x; the micro default run 0.73x.
The prediction leaves out what two processes cost each other (memory traffic, Ray's start of ~10 s), so the bar is
1.25x: on these 2 cores ``auto`` keeps turns for every cell measured, and parallel is for machines where one agent
uses many cores badly.

Only on CPUs: with GPUs, ``auto`` keeps ``local`` and says so (choose ``run.backend=ray`` and ``run.placement``
yourself). Without Ray installed, with one agent, with fewer cores than agents, or on a busy machine (:data:`BUSY`)
it is ``local`` too.
At equal threads a Ray run equals the local one bit for bit (tests/test_ray_backend_on_cpu.py); with a different
thread count per agent the forward pass's floating-point sums change in the last digits (here the entropy and
log-prob-gap diagnostics; samples and predictions of the measured cells were identical), so a cell is not
bit-identical across the two choices, and a method whose reward reads those statistics (RENT, Intuitor) can drift.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from typing import Sequence

MIN_WEIGHTS = 50_000_000
"""the smallest agent's weights per token below which turns are kept: a step's work is then too small for the calls
between processes (measured: the micro models, ~1 M, ran 1.37x slower in parallel: 144 s against 105 s)"""
BUSY = 0.5
"""a 1-minute load average above this share of the cores keeps turns without timing anything: under other work the
two rates measure the neighbours (2 threads read 1.12x one thread here while a test suite ran, against 1.7-1.9x
idle)"""
SHAPES = ((32, 1024, 2816), (512, 1024, 2816))
"""the products timed: a decode step's (32 rows, the real study's 8 prompts x 4 samples) and a training pass's; a
decode-shaped product scales worse with threads (1.72x from one to two cores here) than a training one (1.96x)"""
MIN_GAIN = 1.25
"""predicted speed-up below which turns in one process are kept: the balanced pair above was predicted 1.08-1.18x
and ran 1.00x (Ray's start and two processes' memory traffic are not in the prediction)"""


@dataclass(frozen=True)
class BackendChoice:
    backend: str  # "local" | "ray"
    cpus_per_agent: int  # what each actor gets (ray); 0 with local
    gain: float | None  # the predicted speed-up of parallel over turns (None: not predicted)
    reason: str


def predicted_gain(n: int, rate_all: float, rate_each: float, weights: Sequence[int | None]) -> tuple[float, float]:
    """(predicted speed-up of ``n`` agents in parallel on ``c // n`` cores each over turns on ``c`` cores, balance).

    ``rate_all`` / ``rate_each``: one process's matrix-product rate on all cores / on its share; ``weights``: each
    agent's compute per token (None: unknown, taken as the mean of the known ones, or all equal)."""
    known = [w for w in weights if w]
    fill = sum(known) / len(known) if known else 1.0
    w = [float(x) if x else fill for x in weights]
    balance = sum(w) / (n * max(w))
    return n * rate_each / rate_all * balance, balance


def choose_backend(n: int, weights: Sequence[int | None], *, on_gpu: bool, cpus_per_agent: int = 0,
                   cores: int | None = None, ray_installed: bool | None = None, rates: tuple[float, float] | None = None,
                   load: float | None = None) -> BackendChoice:
    """Resolve ``run.backend=auto`` for ``n`` agents with compute per token ``weights`` (see the module docstring).

    ``cpus_per_agent``: a value the user set (0: cores // n); ``rates``: (all cores, one share) to use instead of
    measuring, ``load``: the 1-minute load average to use instead of reading it (tests)."""
    cores = cores or os.cpu_count() or 1
    if load is None:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if ray_installed is None:
        ray_installed = importlib.util.find_spec("ray") is not None
    if n < 2:
        return BackendChoice("local", 0, None, "one agent")
    if on_gpu:
        return BackendChoice("local", 0, None, "auto decides on CPUs only; for agents on GPUs set run.backend=ray "
                             "and run.placement")
    if not ray_installed:
        return BackendChoice("local", 0, None, "Ray is not installed (pip install -c constraints-cpu.txt -e '.[ray]')")
    each = cpus_per_agent or cores // n
    if each < 1:
        return BackendChoice("local", 0, None, f"{cores} cores for {n} agents")
    if not all(weights):
        return BackendChoice("local", 0, None, "the profile does not say how large its agents are")
    if min(weights) < MIN_WEIGHTS:  # type: ignore[type-var]
        return BackendChoice("local", 0, None, f"the smallest agent does {min(weights) / 1e6:.1f} M multiply-adds "
                             f"a token, under {MIN_WEIGHTS / 1e6:.0f} M: too little work a step for separate processes")
    if rates is None and load > BUSY * cores:
        return BackendChoice("local", 0, None, f"the machine is busy (load average {load:.1f} on {cores} cores): "
                             "a timing now would not say how the run scales")
    if rates is None:
        from corl_bench.train.precision import matmul_rate

        import torch

        before, best = torch.get_num_threads(), {}
        try:  # alternating, best of three each: a busy moment lowers one reading, not the ratio
            for _ in range(3):
                for shape in SHAPES:
                    for threads in (cores, each):
                        torch.set_num_threads(threads)
                        key = (shape, threads)
                        best[key] = max(best.get(key, 0.0), matmul_rate("float32", shape, seconds=0.1))
        finally:
            torch.set_num_threads(before)
        # half a cell decodes (rollouts, evaluation), half trains: the two shapes' scalings averaged
        scaling = sum(best[(s, cores)] / best[(s, each)] for s in SHAPES) / len(SHAPES)
        rate_all = sum(best[(s, cores)] for s in SHAPES) / len(SHAPES)
        rate_each = rate_all / scaling
    else:
        rate_all, rate_each = rates
    gain, balance = predicted_gain(n, rate_all, rate_each, weights)
    why = (f"{n} agents on {cores} cores: products ran {rate_all:.0f} GFLOP/s on {cores} threads and {rate_each:.0f} "
           f"on {each} ({rate_all / rate_each:.2f}x); agent balance {balance:.2f}; predicted {gain:.2f}x in parallel")
    if gain >= MIN_GAIN:
        return BackendChoice("ray", each, gain, why)
    return BackendChoice("local", 0, gain, why + f", under {MIN_GAIN}x")
