"""Where the agents and their rollout engines live on the GPUs: ``run.placement``.

Every agent's rollout engine lives in the agent's own process: in the agent's Ray actor with ``run.backend=ray``
(one process per agent), in the run's one process with ``run.backend=local``. Two placements share one setting:

* ``disjoint`` — each agent's actor reserves its own GPUs (a cohort agent's ``gpus``, else ``run.gpus_per_agent``)
  and its engine stays awake: the layout of the official Co-RL release (each agent a job on its own GPUs) and of
  MARTI (each agent its own actor group).
* ``timeshare`` — the agents share their GPUs: n agents of ``g <= 1`` GPU each reserve ``g / n`` of a GPU, so Ray
  puts them on the same device, and a ``vllm`` engine sleeps while its agent trains (``sleep_level`` 1: weights to
  host memory, KV cache dropped; vLLM's ``LLM.sleep``) and wakes before it is used again, taking the new weights
  (the weight sync wakes it first). Its ``gpu_memory_utilization`` is split between the agents (0.3 / n unless set).
  This is TRL's colocate mode with ``vllm_enable_sleep_mode`` and verl's hybrid engine, for several agents: one
  process per agent, so vLLM's one-sleeping-engine-per-process limit never applies. Local runs with two or more
  ``vllm`` agents in one process are refused (set ``run.backend=ray``).
* ``auto`` — ``disjoint`` where the Ray cluster has a GPU for every agent's reservation (or nobody asks for a GPU),
  else ``timeshare``; ``disjoint`` on the local backend (nothing to reserve).

On a CPU vLLM has no sleep mode: the engine's ``sleep`` pauses vLLM's scheduler and drops its prefix cache, and
``wake_up`` resumes it (the CPU worker logs that it ignores the memory part); the order of sleep, wake and sync is
the same as on a GPU, and the log-prob gap after a wake (``engine/logp_gap_*``) is tested there.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from corl_bench.config import ConfigError

log = logging.getLogger(__name__)

DEFAULT_GPU_MEMORY = 0.3  # VLLMEngine's gpu_memory_utilization default (one engine beside its trainer)


@dataclass(frozen=True)
class Placement:
    """A resolved placement: its kind, each agent's GPU reservation (cohort order) and whether engines sleep."""

    kind: str  # "disjoint" | "timeshare"
    gpus: tuple[float, ...]  # per agent, what its Ray actor reserves
    sleep: bool  # rollout engines sleep while their agent trains

    def describe(self) -> str:
        return f"{self.kind} (GPUs per agent: {', '.join(f'{g:g}' for g in self.gpus)})"


def wanted_gpus(cfg: Any) -> tuple[float, ...]:
    """Each cohort agent's GPUs as configured: its own ``gpus``, else ``run.gpus_per_agent``."""
    return tuple(float(s.gpus if s.gpus is not None else cfg.run.gpus_per_agent) for s in cfg.cohort.agents)


def check(cfg: Any) -> None:
    """Validate-time refusals (one line each); the cluster's GPU count is only known when the agents start."""
    want, n = wanted_gpus(cfg), len(cfg.cohort.agents)
    if cfg.run.placement != "timeshare":
        return
    if cfg.run.backend == "local" and cfg.rollout.backend == "vllm" and n > 1:
        raise ConfigError(f"run.placement=timeshare with rollout.backend=vllm and {n} agents needs one process per "
                          "agent (vLLM keeps one sleeping engine per process): set run.backend=ray")
    big = [f"{s.name} ({g:g})" for s, g in zip(cfg.cohort.agents, want) if g > 1]
    if big:
        raise ConfigError(f"run.placement=timeshare shares one GPU between agents of at most one GPU each; agent "
                          f"{big[0]} asks for more: set its gpus (or run.gpus_per_agent) to 1, or "
                          "run.placement=disjoint")


def resolve(cfg: Any, cluster_gpus: float | None = None) -> Placement:
    """The placement ``cfg`` asks for on a cluster with ``cluster_gpus`` GPUs (None: the local backend). Two agents
    of one GPU on a one-GPU cluster: ``auto`` gives ``timeshare``, half a GPU each; on two GPUs ``disjoint``."""
    check(cfg)
    want, n = wanted_gpus(cfg), len(cfg.cohort.agents)
    kind = cfg.run.placement
    if kind == "auto":
        fits = cluster_gpus is None or sum(want) == 0 or sum(want) <= cluster_gpus + 1e-9
        kind = "disjoint" if fits or max(want) > 1 else "timeshare"
    if kind == "disjoint":
        if cluster_gpus is not None and sum(want) > cluster_gpus + 1e-9:
            raise ConfigError(f"run.placement=disjoint: the agents ask for {sum(want):g} GPUs, the Ray cluster has "
                              f"{cluster_gpus:g}: set run.placement=timeshare (agents share GPUs) or add GPUs")
        return Placement("disjoint", want, sleep=False)
    shared = tuple(g / n for g in want)
    if cluster_gpus is not None and max(want, default=0) > cluster_gpus + 1e-9:
        raise ConfigError(f"run.placement=timeshare: an agent asks for {max(want):g} GPU, the Ray cluster has "
                          f"{cluster_gpus:g}: lower run.gpus_per_agent or add a GPU")
    return Placement("timeshare", shared, sleep=True)


def engine_options(cfg: Any, placement: Placement | None = None) -> dict[str, Any]:
    """``rollout.engine_options`` with what the placement adds for a ``vllm`` engine under ``timeshare``: sleep
    while training (``sleep_level`` 1) and a share of the GPU's memory; options the user set win."""
    options = dict(cfg.rollout.engine_options)
    placement = placement or resolve(cfg)
    if placement.sleep and cfg.rollout.backend == "vllm":
        n = max(1, len(cfg.cohort.agents)) if cfg.run.backend == "ray" else 1
        options.setdefault("sleep_level", 1)
        options.setdefault("gpu_memory_utilization", round(DEFAULT_GPU_MEMORY / n, 4))
    return options
