"""``run.backend=ray``: every agent in its own Ray actor, the controller moving only plain data (an agent with several
ranks: a group of actors, one per rank, in a placement group — :mod:`corl_bench.train.ranks`).

Each actor builds its agent where it runs (the model is loaded on the actor's node, on the devices Ray reserved for
it: ``run.gpus_per_agent`` / ``run.cpus_per_agent``, or a cohort agent's own ``gpus`` / ``cpus``), so weights never
travel through the controller. The controller holds a :class:`RayAgent` per actor: the calls of
:class:`corl_bench.train.boundary.AgentHandle` (:data:`~corl_bench.train.boundary.BOUNDARY`: ``generate``,
``score``, ``update``, ``update_auxiliary``, ``discard``, ``checkpoint``, ``restore``, ``save``) as blocking calls,
plus :meth:`RayAgent.submit` which starts a call and returns at once. The trainer's
:class:`~corl_bench.train.boundary.AgentGroup` submits a phase to every agent before it waits for any, so the
rollouts, forward passes and updates of all agents run at the same time; what crosses is requests, completions
(token ids, log-probs, text), advantages, statistics and folder names. Checkpoints are written and read by each
actor itself (``checkpoint(dir)`` / ``restore(dir)``): weights and optimiser state never reach the controller.

Everything an agent computes is the same as in one process: each actor seeds torch with ``run.seed`` as the
in-process runner does, and every agent's sampling has its own seed, so metrics, predictions and weights equal
those of ``run.backend=local`` (tested, on one node and on a two-node cluster). Multi-node: ``ray start --head`` on
one machine, ``ray start --address=<head>:6379`` on the others (each with corl-bench installed and the results
directory on a shared filesystem: the actors write their checkpoints there), then ``corl-bench run ... --set
run.backend=ray`` on the head. An agent is pinned to a node by a custom resource that node advertises (``ray start
--resources '{"node_a": 1}'``) and the agent asks for (its ``resources``, or ``run.agent_resources``); an agent no
node can host, or more than the cluster holds in all, is refused at once (:func:`check_nodes`) instead of
waiting forever. Where each actor ran (Ray node id, host, pid, device) is recorded in run.json (``actors``), and
who wrote each checkpoint file in the checkpoint's ``writers.json``.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Sequence

from corl_bench import placement
from corl_bench.train.boundary import BOUNDARY

log = logging.getLogger(__name__)

# environment a local worker process needs to find the same caches and data as the controller
_FORWARDED = ("CORL_BENCH_CACHE", "CORL_BENCH_DATA", "HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE",
              "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM", "PYTHONPATH")


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RuntimeError("run.backend=ray needs Ray: pip install -c constraints-cpu.txt -e '.[ray]' (or "
                           "pip install ray), or set run.backend=local") from None
    return ray


def forwarded_env() -> dict[str, str]:
    """The controller's environment variables that a worker needs (caches, data, offline switches)."""
    return {k: os.environ[k] for k in _FORWARDED if k in os.environ}


def register_families(families: dict[str, Any]) -> None:
    """In a worker process: register the model families the controller had registered at run time (a plugin or a
    script's own), unless the worker knows them already."""
    from corl_bench.registries import FAMILIES

    for name, family in families.items():
        if name not in FAMILIES:
            FAMILIES.register(name, family)


def runtime_families(names: Any) -> dict[str, Any]:
    """{name: family} of the controller's registered families among ``names`` (what a worker is sent)."""
    from corl_bench.registries import FAMILIES

    return {n: FAMILIES.get(n) for n in names if n in FAMILIES}


def init_ray(address: str = "", num_cpus: int | None = None) -> Any:
    """Connect to the Ray cluster at ``address`` (``auto``: the one running here; empty: ``$RAY_ADDRESS`` if set,
    else a new local Ray); returns the ``ray`` module. Idempotent."""
    ray = _ray()
    if not ray.is_initialized():
        address = address or os.environ.get("RAY_ADDRESS", "")
        kwargs: dict[str, Any] = {"address": address} if address else {"num_cpus": num_cpus or os.cpu_count() or 1,
                                                                          "object_store_memory": 512 * 2**20}
        ray.init(log_to_driver=False, logging_level=logging.WARNING, include_dashboard=False, **kwargs)
        log.info("ray: %s", "joined " + address if address else "started a local Ray")
    return ray


class AgentHost:
    """What runs inside one actor: builds the agent (profile, model, optimizer, engines) and serves its calls."""

    def __init__(self, cfg: Any, spec: Any, auxiliary: Sequence[Any], threads: int,
                 families: dict[str, Any] | None = None, engine_options: dict[str, Any] | None = None) -> None:
        import torch

        from corl_bench.hostmem import keep_for_process
        from corl_bench.registries import PROFILES
        from corl_bench.train.agent import Agent

        register_families(families or {})

        keep_for_process(cfg.memory.keep_host_memory)  # this process exists for the agent (corl_bench.hostmem)
        torch.set_num_threads(max(1, threads))
        torch.manual_seed(cfg.run.seed)  # as the in-process runner does before it builds the agents
        profile = PROFILES.get(cfg.model.profile)(cfg.model)
        profile.configure(cfg)
        device = spec.device or cfg.model.device
        if device.startswith("cuda:") and os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
            device = "cuda"  # Ray shows the actor only its own GPUs: cuda:N of the cohort names a host device
        model, tok = profile.load(spec.family, device)
        self.agent = Agent(spec, model, tok, cfg.grpo, backend=cfg.rollout.backend, max_batch=cfg.rollout.max_batch,
                           engine_options=dict(cfg.rollout.engine_options if engine_options is None else engine_options),
                           memory=cfg.memory,
                           temperature=cfg.rollout.temperature, auxiliary=auxiliary,
                           freeze_vision=cfg.model.freeze_vision)

    def call(self, method: str, args: tuple, kwargs: dict) -> Any:
        """The agent's boundary call ``method`` (one of :data:`BOUNDARY`), made in this actor (a checkpoint's
        receipt names this actor's node)."""
        if method not in BOUNDARY:
            raise AttributeError(f"{method} is not part of the agent boundary ({', '.join(BOUNDARY)})")
        out = getattr(self.agent, method)(*args, **kwargs)
        if method == "checkpoint":
            import dataclasses

            out = dataclasses.replace(out, node=_ray().get_runtime_context().get_node_id())
        return out

    def tokenizer(self) -> Any:
        return self.agent.tokenizer

    def where(self) -> dict[str, Any]:
        """Where this actor runs: Ray node id and address, host, pid, torch threads, device, the Ray resources it
        holds."""
        import socket

        import torch

        ctx = _ray().get_runtime_context()
        return {"node": ctx.get_node_id(), "node_ip": _ray().util.get_node_ip_address(), "host": socket.gethostname(),
                "pid": os.getpid(), "threads": torch.get_num_threads(),
                "device": str(next(self.agent.model.parameters()).device),
                "resources": {k: v for k, v in sorted(ctx.get_assigned_resources().items())}}


class Pending:
    """A call started on an actor; :meth:`result` waits for it (and raises the agent's own exception)."""

    def __init__(self, ref: Any) -> None:
        self.ref = ref

    def result(self) -> Any:
        ray = _ray()
        try:
            return ray.get(self.ref)
        except ray.exceptions.RayTaskError as e:  # the agent's exception itself (NumericalError, ...), not Ray's
            cause = getattr(e, "cause", None)
            if isinstance(cause, BaseException):
                raise cause from None
            raise


class RayAgent:
    """The controller's handle on one agent actor: an :class:`~corl_bench.train.boundary.AgentHandle` whose calls
    (:data:`BOUNDARY`) block, plus :meth:`submit`, which starts one and returns at once (a
    :class:`~corl_bench.train.boundary.Submitting` handle)."""

    def __init__(self, handle: Any, spec: Any, tokenizer: Any, where: dict[str, Any] | None = None) -> None:
        self.handle = handle
        self.spec = spec
        self.name = spec.name
        self.tokenizer = tokenizer  # a copy, for rendering evaluation prompts with the agent's chat template
        self.where = where or {}  # AgentHost.where(): Ray node, host, pid, device, resources

    def submit(self, method: str, *args: Any, **kwargs: Any) -> Pending:
        """The boundary call ``method`` started on the actor; :meth:`Pending.result` waits for it."""
        if method not in BOUNDARY:
            raise AttributeError(f"{method} is not part of the agent boundary ({', '.join(BOUNDARY)})")
        return Pending(self.handle.call.remote(method, args, kwargs))

    def __getattr__(self, attr: str) -> Any:
        if attr not in BOUNDARY:
            raise AttributeError(attr)
        return lambda *args, **kwargs: self.submit(attr, *args, **kwargs).result()


def demands(cfg: Any, gpus: Sequence[float] | None = None) -> dict[str, dict[str, float]]:
    """agent -> the Ray resources its actor asks for: ``CPU``, ``GPU`` (when > 0: ``gpus``, the placement's
    reservation per agent in cohort order, else as configured) and its custom ``resources``."""
    gpus = placement.wanted_gpus(cfg) if gpus is None else gpus
    out = {}
    for spec, g in zip(cfg.cohort.agents, gpus):
        cpus = spec.cpus if spec.cpus is not None else cfg.run.cpus_per_agent
        out[spec.name] = {"CPU": float(cpus), **({"GPU": float(g)} if g else {}),
                          **{k: float(v) for k, v in spec.resources.items()}}
    return out


def _shown(resources: dict[str, float]) -> str:
    return ", ".join(f"{k}={v:g}" for k, v in sorted(resources.items()) if k != "memory" and
                     k != "object_store_memory" and not k.startswith("node:")) or "nothing"


def check_nodes(wanted: dict[str, dict[str, float]], nodes: Sequence[dict[str, float]]) -> None:
    """One-line MachineError unless every agent's ``wanted`` resources fit one of ``nodes`` (each node's total
    resources, as ``ray.nodes()`` lists them) and all agents together fit the cluster's totals: otherwise Ray would
    keep the actor waiting forever. (A cluster whose autoscaler adds nodes on demand is refused too: start the
    nodes first.)"""
    from corl_bench.config import MachineError

    offered = "; ".join(f"node {i}: {_shown(n)}" for i, n in enumerate(nodes)) or "no node"
    for name, need in wanted.items():
        if not any(all(n.get(k, 0.0) >= v - 1e-9 for k, v in need.items()) for n in nodes):
            raise MachineError(f"no Ray node can host agent {name} ({_shown(need)}; the cluster has {offered}): "
                               "start a node that advertises it (ray start --address=<head> --resources "
                               "'{\"<name>\": 1}'), or lower the agent's cpus / gpus / resources")
    total: dict[str, float] = {}
    for need in wanted.values():
        for k, v in need.items():
            total[k] = total.get(k, 0.0) + v
    for k, v in sorted(total.items()):
        have = sum(n.get(k, 0.0) for n in nodes)
        if have < v - 1e-9:  # shares such as 3 x 0.1 GPU add up to a hair over 0.3
            raise MachineError(f"the agents need {k}={v:g} together and the Ray cluster has {k}={have:g} in all "
                               f"({offered}): add nodes, or give each agent less (run.cpus_per_agent, "
                               "run.gpus_per_agent, the agents' resources)")


def start_agents(cfg: Any, auxiliary: Sequence[Any]) -> list[Any]:
    """One actor per cohort agent, with its resources (checked against the cluster first) — or, for an agent with
    several ranks, a group of actors (:mod:`corl_bench.train.ranks`); returns their handles, in cohort order, once
    every agent is built, each Ray actor's with :attr:`RayAgent.where` it runs."""
    from corl_bench.config import agent_resources

    ray = init_ray(cfg.run.ray_address)
    place = placement.resolve(cfg, float(ray.cluster_resources().get("GPU", 0.0)))
    wanted = demands(cfg, place.gpus)
    check_nodes(wanted, [dict(n["Resources"]) for n in ray.nodes() if n.get("Alive")])
    options = placement.engine_options(cfg, place)
    log.info("ray: placement %s", place.describe())
    env = forwarded_env()
    remote = ray.remote(AgentHost)
    families = runtime_families(s.family for s in cfg.cohort.agents)
    handles, plain = [], []
    sharded: dict[int, Any] = {}
    try:
        for i, spec in enumerate(cfg.cohort.agents):
            need = wanted[spec.name]
            ranks = agent_resources(spec, cfg.run)[0]
            if ranks > 1:  # the agent's GPUs (as placed) and CPUs shared by its ranks
                sharded[i] = start_sharded(cfg, spec, auxiliary, ranks, need.get("GPU", 0.0), need["CPU"],
                                           engine_options=options)
                continue
            threads = cfg.model.threads or max(1, int(need["CPU"]))
            handles.append(remote.options(num_cpus=need["CPU"], num_gpus=need.get("GPU", 0.0),
                                          resources=dict(spec.resources) or None, name=None, max_restarts=0,
                                          runtime_env={"env_vars": env}).remote(cfg, spec, tuple(auxiliary), threads,
                                                                              families, options))
            plain.append(spec)
        toks = ray.get([h.tokenizer.remote() for h in handles])
        wheres = ray.get([h.where.remote() for h in handles])
    except BaseException as e:
        stop_agents(handles + list(sharded.values()))
        cause = getattr(e, "cause", None) if isinstance(e, ray.exceptions.RayTaskError) else None
        if isinstance(cause, BaseException):
            raise cause from None
        raise
    actors = [RayAgent(h, s, t, w) for h, s, t, w in zip(handles, plain, toks, wheres)]
    for a in actors:
        w = a.where
        log.info("agent %s: actor on node %s (%s, pid %s, %s threads, %s, %s)", a.name, w["node"][:12], w["host"],
                 w["pid"], w["threads"], w["device"], _shown(w["resources"]))
    rest = iter(actors)
    return [sharded[i] if i in sharded else next(rest) for i in range(len(cfg.cohort.agents))]


def start_sharded(cfg: Any, spec: Any, auxiliary: Sequence[Any], ranks: int, gpus: float, cpus: float,
                  engine_options: dict[str, Any] | None = None) -> Any:
    """The cohort agent ``spec`` as ``ranks`` ranks (:mod:`corl_bench.train.ranks`, a
    :class:`~corl_bench.train.ranks.ShardedAgentHandle`): Ray actors with ``run.backend=ray``, local processes
    otherwise; each loads the model from the run's profile on its device. ``engine_options``: the rollout engine's
    (``run.placement`` adds to them), else ``rollout.engine_options``."""
    import functools

    from corl_bench.train.ranks import ProcessRanks, RayRanks, ShardedAgentHandle
    from corl_bench.train.sharded import Recipe

    device = spec.device or cfg.model.device
    kind = "cuda" if device.startswith("cuda") or (device == "auto" and gpus) else "cpu"
    per_cpus = cpus / ranks
    threads = cfg.model.threads or max(1, int(per_cpus))
    recipe = Recipe(spec=spec, load=functools.partial(load_from_profile, cfg, spec.family,
                                                      runtime_families([spec.family])),
                    grpo=cfg.grpo, seed=cfg.run.seed, threads=threads, device=kind,
                    agent_kwargs=dict(backend=cfg.rollout.backend, max_batch=cfg.rollout.max_batch,
                                      engine_options=dict(engine_options if engine_options is not None
                                                          else cfg.rollout.engine_options), memory=cfg.memory,
                                      temperature=cfg.rollout.temperature, auxiliary=tuple(auxiliary),
                                      freeze_vision=cfg.model.freeze_vision))
    if cfg.run.backend == "ray":
        init_ray(cfg.run.ray_address)
        group: ProcessRanks | RayRanks = RayRanks(recipe, ranks, per_cpus, gpus / ranks, forwarded_env(),
                                                  {k: float(v) / ranks for k, v in spec.resources.items()})
    else:
        group = ProcessRanks(recipe, ranks)
    handle = ShardedAgentHandle(spec, group, micro_batch=cfg.memory.micro_batch)
    log.info("agent %s: %d ranks (%s, %s), FSDP2", spec.name, ranks, "Ray actors" if cfg.run.backend == "ray"
             else "local processes", kind)
    return handle


def load_from_profile(cfg: Any, family: str, families: dict[str, Any], device: str) -> tuple[Any, Any]:
    """In a rank: the family's model and tokenizer from the run's profile (as :class:`~corl_bench.train.actors.
    AgentHost` loads them)."""
    from corl_bench.registries import PROFILES

    register_families(families)
    profile = PROFILES.get(cfg.model.profile)(cfg.model)
    profile.configure(cfg)
    return profile.load(family, device)


def stop_agents(agents: Sequence[Any]) -> None:
    """Kill the actors (their models and optimizer state go with them); a sharded agent's ranks (Ray actors or
    local processes) are stopped by its handle."""
    from corl_bench.train.ranks import ShardedAgentHandle

    for a in agents:
        if isinstance(a, ShardedAgentHandle):
            a.close()
    try:
        import ray
    except ImportError:
        return
    for a in agents:
        if isinstance(a, ShardedAgentHandle):
            continue
        handle = getattr(a, "handle", a)
        try:
            ray.kill(handle)
        except Exception:  # noqa: BLE001 - an actor that died already
            pass
