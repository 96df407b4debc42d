"""The controller's side of a sharded agent (:mod:`corl_bench.train.sharded`): its ranks and one handle on them.

:class:`ShardedAgentHandle` is an :class:`~corl_bench.train.boundary.AgentHandle` (and
:class:`~corl_bench.train.boundary.Submitting`: a call starts on every rank before any is waited for) over R ranks:

    generate, save              rank 0 (it holds the full copy of the policy the rollout engine samples from)
    score(samples)              R contiguous slices (:func:`~corl_bench.train.sharded.split`), one per rank; the
                                per-sample statistics come back in the samples' order
    update(advantages)          each rank the advantages of the samples it scored; rank 0's statistics (every rank
                                computes the same all-reduced ones)
    update_auxiliary, discard, checkpoint, restore    every rank (collectives)

The ranks are either :class:`RayRanks` (``run.backend=ray``: one Ray actor per rank, all in one placement group,
each with its share of the agent's GPUs and CPUs) or :class:`ProcessRanks` (``run.backend=local``, and the CPU
tests: processes spawned by ``torch.multiprocessing``, talking over pipes). When a rank fails, the others may be
blocked in a collective: the handle waits a few seconds for them, then stops the whole group and raises the
failure (the run then fails; resume it from its last checkpoint).
"""

from __future__ import annotations

import logging
import time
from multiprocessing.connection import wait as wait_conns
from typing import Any, Callable, Sequence

from corl_bench.train.boundary import BOUNDARY, SampleStats
from corl_bench.train.sharded import RankHost, Recipe, split

log = logging.getLogger(__name__)
_GRACE_S = 10.0  # how long the other ranks get to report once one has failed


def _picklable(e: BaseException) -> BaseException:
    import pickle

    try:
        pickle.dumps(e)
        return e
    except Exception:  # noqa: BLE001 - an exception that cannot cross a pipe
        return RuntimeError(f"{type(e).__name__}: {e}")


def _serve(conn: Any, recipe: Recipe, rank: int, world: int, init_method: str) -> None:
    """A spawned rank's main loop: set up, then answer ``(method, args, kwargs)`` messages until ``None``."""
    host = RankHost()
    try:
        host.setup(recipe, rank, world, init_method, local_device=rank)
        conn.send(("ok", None))
    except BaseException as e:  # noqa: BLE001 - reported to the controller
        conn.send(("err", _picklable(e)))
        return
    try:
        while True:
            msg = conn.recv()
            if msg is None:
                break
            method, args, kwargs = msg
            try:
                local = {"_tokenizer": host.tokenizer, "_where": host.where}
                conn.send(("ok", local[method]() if method in local else host.call(method, args, kwargs)))
            except BaseException as e:  # noqa: BLE001 - reported to the controller
                conn.send(("err", _picklable(e)))
    except EOFError:  # the controller went away
        pass
    finally:
        host.close()


class ProcessRanks:
    """R ranks as processes spawned on this machine (``torch.multiprocessing``, spawn context), rendezvous on a free
    local port."""

    def __init__(self, recipe: Recipe, world: int) -> None:
        import torch.multiprocessing as mp

        from corl_bench.train.sharded import free_port

        ctx = mp.get_context("spawn")
        init_method = f"tcp://127.0.0.1:{free_port()}"
        self.world = world
        self.conns, self.procs = [], []
        for rank in range(world):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_serve, args=(child, recipe, rank, world, init_method), daemon=True,
                               name=f"corl-rank-{recipe.spec.name}-{rank}")
            proc.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(proc)
        try:
            self.gather(list(range(world)), [None] * world)  # every rank set up (or the first failure raised)
        except BaseException:
            self.close()
            raise

    def start(self, rank: int, method: str, args: tuple = (), kwargs: dict | None = None) -> int:
        self.conns[rank].send((method, args, kwargs or {}))
        return rank

    def gather(self, ranks: list[int], tickets: list[Any]) -> list[Any]:
        """The replies of ``ranks`` in order; the first failure raised once all replied (or the grace ran out)."""
        replies: dict[int, tuple[str, Any]] = {}
        deadline = None
        while len(replies) < len(ranks):
            waiting = {self.conns[r]: r for r in ranks if r not in replies}
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = wait_conns(list(waiting), timeout=timeout if timeout is not None else 5.0)
            for conn in ready:
                try:
                    replies[waiting[conn]] = conn.recv()
                except EOFError:
                    replies[waiting[conn]] = ("err", RuntimeError(f"rank {waiting[conn]} died"))
            if not ready:
                dead = [r for r in ranks if r not in replies and not self.procs[r].is_alive()]
                for r in dead:
                    replies[r] = ("err", RuntimeError(f"rank {r} exited (code {self.procs[r].exitcode})"))
            if deadline is None and any(kind == "err" for kind, _ in replies.values()):
                deadline = time.monotonic() + _GRACE_S
            if deadline is not None and time.monotonic() >= deadline and len(replies) < len(ranks):
                self.close()
                break
        errors = [replies[r][1] for r in ranks if r in replies and replies[r][0] == "err"]
        if errors:
            raise errors[0]
        return [replies[r][1] for r in ranks]

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(None)
            except (OSError, ValueError):
                pass
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
        self.conns, self.procs = [], []


class RayRanks:
    """R ranks as Ray actors in one placement group (``PACK``: on one node when it fits), each reserving ``cpus``,
    ``gpus`` and custom ``resources`` (its share of the agent's: an agent pinned to a node by a resource keeps its
    ranks there); rendezvous at rank 0's node."""

    def __init__(self, recipe: Recipe, world: int, cpus: float, gpus: float, env: dict[str, str],
                 resources: dict[str, float] | None = None) -> None:
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        import ray  # started (or joined) by the caller: corl_bench.train.actors.start_agents

        self.ray = ray
        self.world = world
        resources = dict(resources or {})
        bundle = {"CPU": cpus, **({"GPU": gpus} if gpus else {}), **resources}
        self.pg = placement_group([dict(bundle) for _ in range(world)], strategy="PACK")
        ray.get(self.pg.ready())
        remote = ray.remote(RankHost)
        self.actors = [remote.options(num_cpus=cpus, num_gpus=gpus, resources=resources or None, max_restarts=0,
                                      runtime_env={"env_vars": env},
                                      scheduling_strategy=PlacementGroupSchedulingStrategy(
                                          placement_group=self.pg, placement_group_bundle_index=rank)).remote()
                       for rank in range(world)]
        try:
            init_method = ray.get(self.actors[0].address.remote())
            refs = [a.setup.remote(recipe, rank, world, init_method, 0) for rank, a in enumerate(self.actors)]
            self.gather(list(range(world)), refs)
        except BaseException:
            self.close()
            raise

    def start(self, rank: int, method: str, args: tuple = (), kwargs: dict | None = None) -> Any:
        actor = self.actors[rank]
        if method in ("_tokenizer", "_where"):
            return (actor.tokenizer if method == "_tokenizer" else actor.where).remote()
        return actor.call.remote(method, args, kwargs or {})

    def gather(self, ranks: list[int], tickets: list[Any]) -> list[Any]:
        ray = self.ray
        pending, deadline, error = list(tickets), None, None
        while pending:
            ready, pending = ray.wait(pending, num_returns=1,
                                      timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
            for ref in ready:
                try:
                    ray.get(ref)
                except ray.exceptions.RayError as e:
                    cause = getattr(e, "cause", None)
                    error = error or (cause if isinstance(cause, BaseException) else e)
                    deadline = deadline or time.monotonic() + _GRACE_S
            if not ready and deadline is not None:
                self.close()
                break
        if error is not None:
            raise error
        return ray.get(list(tickets))

    def close(self) -> None:
        from ray.util.placement_group import remove_placement_group

        for a in self.actors:
            try:
                self.ray.kill(a)
            except Exception:  # noqa: BLE001 - an actor that died already
                pass
        self.actors = []
        try:
            remove_placement_group(self.pg)
        except Exception:  # noqa: BLE001
            pass


class _Gathering:
    """A call started on some ranks; :meth:`result` waits for them and merges their replies."""

    def __init__(self, ranks: Any, which: list[int], tickets: list[Any], merge: Callable[[list[Any]], Any]) -> None:
        self.ranks, self.which, self.tickets, self.merge = ranks, which, tickets, merge

    def result(self) -> Any:
        return self.merge(self.ranks.gather(self.which, self.tickets))


def _merge_stats(replies: list[SampleStats]) -> SampleStats:
    return SampleStats(entropy=[x for r in replies for x in r.entropy],
                       self_certainty=[x for r in replies for x in r.self_certainty])


class ShardedAgentHandle:
    """The controller's handle on one agent trained by R ranks (module docstring)."""

    def __init__(self, spec: Any, ranks: ProcessRanks | RayRanks, micro_batch: int = 0) -> None:
        self.spec, self.name, self.ranks, self.world = spec, spec.name, ranks, ranks.world
        self.micro_batch = micro_batch
        self._scored: list[list[tuple[int, int]]] = []  # each score() call's slices since the last update
        (self.tokenizer,) = ranks.gather([0], [ranks.start(0, "_tokenizer")])
        every = list(range(self.world))
        wheres = ranks.gather(every, [ranks.start(r, "_where") for r in every])
        #: where the ranks run (run.json ``actors``): rank 0's node, host, pid and device, and every rank's
        self.where = {**wheres[0], "ranks": wheres}

    def _on(self, which: list[int], method: str, per_rank: Sequence[tuple[tuple, dict]],
            merge: Callable[[list[Any]], Any]) -> _Gathering:
        tickets = [self.ranks.start(r, method, a, k) for r, (a, k) in zip(which, per_rank)]
        return _Gathering(self.ranks, which, tickets, merge)

    def submit(self, method: str, *args: Any, **kwargs: Any) -> _Gathering:
        """The boundary call ``method`` started on the ranks it needs; ``.result()`` waits and merges."""
        if method not in BOUNDARY:
            raise AttributeError(f"{method} is not part of the agent boundary ({', '.join(BOUNDARY)})")
        every = list(range(self.world))
        first = lambda replies: replies[0]  # noqa: E731
        if method in ("generate", "save"):
            return self._on([0], method, [(args, kwargs)], first)
        if method == "score":
            samples = list(args[0] if args else kwargs.pop("samples"))
            slices = split(len(samples), self.world)
            if self.micro_batch:
                parts = {-(-(b - a) // self.micro_batch) for a, b in slices}
                if len(parts) > 1:
                    raise RuntimeError(f"agent {self.name}: memory.micro_batch={self.micro_batch} gives its "
                                       f"{self.world} ranks different numbers of micro-batches for {len(samples)} "
                                       "samples; choose a micro_batch that divides the samples per rank, or 0")
            self._scored.append(slices)
            return self._on(every, method, [((samples[a:b],), kwargs) for a, b in slices], _merge_stats)
        if method == "update":
            adv = list(args[0] if args else kwargs.pop("advantages"))
            rest = args[1:]
            n = sum(slices[-1][1] for slices in self._scored)
            if len(adv) != n:
                raise RuntimeError(f"agent {self.name}: {len(adv)} advantages for {n} scored samples")
            per_rank, offset = [[] for _ in every], 0
            for slices in self._scored:
                for r, (a, b) in enumerate(slices):
                    per_rank[r] += adv[offset + a: offset + b]
                offset += slices[-1][1]
            self._scored = []
            return self._on(every, method, [((p, *rest), kwargs) for p in per_rank], first)
        if method == "discard":
            self._scored = []
        return self._on(every, method, [(args, kwargs)] * self.world, first)

    def __getattr__(self, attr: str) -> Any:
        if attr not in BOUNDARY:
            raise AttributeError(attr)
        return lambda *args, **kwargs: self.submit(attr, *args, **kwargs).result()

    def close(self) -> None:
        """Stop the ranks (their shards go with them)."""
        self.ranks.close()
