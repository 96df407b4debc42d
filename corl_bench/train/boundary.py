"""The agent boundary, typed once: :class:`AgentHandle` is every call the controller makes on an agent, and
:class:`AgentGroup` makes each call on a whole cohort and returns the per-agent results.

An agent lives in the controller's process (:class:`corl_bench.train.agent.Agent`) or in another one (a Ray actor,
:class:`corl_bench.train.actors.RayAgent`); either way the controller sees only an :class:`AgentHandle`. Every
argument and result of a call is plain, picklable data (requests, completions, lists of floats, small frozen
dataclasses, paths): no tensor of model or optimiser state crosses. Weights and optimiser state stay where the agent
lives; :meth:`AgentHandle.checkpoint` writes them from there and :meth:`AgentHandle.restore` reads them back.

:data:`BOUNDARY`, the list of call names, is derived from the protocol: the Ray actor (:class:`~corl_bench.train.
actors.AgentHost`), its controller-side handle and the tests' pickling proxies all read it, so a new call is added
in one place (here, and on :class:`~corl_bench.train.agent.Agent`, which a test checks against the protocol).

The small result types (:class:`TrainSample`, :class:`SampleStats`, :class:`UpdateStats`) live here too
(import them from here). Nothing here imports torch.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Protocol, Sequence, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from corl_bench.config import AgentSpec
    from corl_bench.rollout import Completion, Prompt, Request, SamplingParams

log = logging.getLogger(__name__)

__all__ = ["BOUNDARY", "AgentGroup", "AgentHandle", "CheckpointFile", "SampleStats", "Submitting", "TrainSample",
           "UpdateStats", "boundary_calls", "checkpoint_file"]

POLICY = "policy"
T = TypeVar("T")


# ---------------------------------------------------------------------- the plain data that crosses
@dataclass(frozen=True)
class TrainSample:
    """One sequence an agent trains on: the request and the completion that answers it."""

    request: Request
    completion: Completion


@dataclass(frozen=True)
class SampleStats:
    """Detached per-sample statistics of the policy from the training forward pass (one value per sample)."""

    entropy: list[float]  # mean token entropy of softmax(logits / T) over the response
    self_certainty: list[float]  # mean token KL(U || p) over the response


@dataclass(frozen=True)
class UpdateStats:
    """Scalar statistics of one optimiser step (the losses are means over the update's samples / tokens)."""

    loss: float
    pg_loss: float
    kl: float
    clip_fraction: float
    grad_norm: float
    entropy: float  # mean token entropy of the policy on its own completions (at the rollout temperature)
    n_tokens: int
    logp_gap_mean: float | None = None  # mean |training forward - rollout engine| log-prob of the sampled tokens
    logp_gap_max: float | None = None  # its max (None where the engine gave no log-probs)


@dataclass(frozen=True)
class CheckpointFile:
    """What an agent wrote into a checkpoint folder, and where from: the file's name and size, and the host,
    process and (under Ray) node that wrote it. The controller records it (``writers.json``); the state itself
    never crosses."""

    file: str
    bytes: int
    host: str
    pid: int
    node: str = ""  # the Ray node id of the agent's actor ("" in-process)


def checkpoint_file(directory: Path, name: str) -> Path:
    """``<directory>/agent-<name>.pt``: where agent ``name`` keeps its state in a checkpoint folder."""
    return Path(directory) / f"agent-{name}.pt"


@runtime_checkable
class AgentHandle(Protocol):
    """What the controller may do with one agent. Every call blocks until the agent has finished it; arguments and
    results are picklable plain data. P = prompts, N = completions per prompt, S = samples, T = tokens."""

    name: str
    """the agent's name (unique in its cohort)"""
    spec: AgentSpec
    """the cohort entry it was built from (family, view, seed offset, device)"""

    def generate(self, requests: Sequence[Prompt], params: SamplingParams, *, model: str = POLICY
                 ) -> list[list[Completion]]:
        """Rollouts: ``result[p]`` holds ``params.n`` completions of ``requests[p]`` ([P][N]), sampled by the
        policy or by the auxiliary model ``model`` (one the method declared with ``generates=True``)."""
        ...

    def score(self, samples: Sequence[TrainSample]) -> SampleStats:
        """The training forward pass over S (request, completion) samples; returns per-sample detached statistics
        (``entropy``, ``self_certainty``: S floats each). The autograd graph (or the micro-batches to recompute)
        stays inside the agent until :meth:`update`; a second score() before update() adds its samples to the
        same update (a method's extra samples)."""
        ...

    def explore(self, unlearn: Sequence[tuple[Prompt, str]], requests: Sequence[Prompt], params: SamplingParams, *,
                model: str, lr: float, eps: float = 0.01) -> list[list[Completion]]:
        """DCRL's explorer pool: the auxiliary model ``model`` set to the current policy, moved one optimiser step
        (``lr``) away from the tokens of the ``unlearn`` (request, completion text) pairs, then sampling ``params.n``
        completions of each request ([P][N]). The policy and its optimiser are not touched."""
        ...

    def likelihood(self, requests: Sequence[Prompt], texts: Sequence[str]) -> list[float]:
        """The policy's mean log-probability (temperature 1, no grad) of each ``texts[s]`` as the reply to
        ``requests[s]``, the text tokenized by this agent's own tokenizer (so it scores another model's completion
        whatever that model's tokenizer): S floats. Nothing is kept for :meth:`update` (a peer's scoring forward)."""
        ...

    def update(self, advantages: Sequence[float], max_len: int | None = None) -> UpdateStats:
        """One GRPO optimiser step on everything scored since the last update: one advantage per scored sample
        (S floats, in scoring order); ``max_len`` is the generation limit (Dr. GRPO's constant denominator).
        Returns scalar statistics (loss, pg_loss, kl, clip_fraction, grad_norm, entropy, n_tokens)."""
        ...

    def update_auxiliary(self, name: str, alpha: float) -> None:
        """auxiliary ``name`` <- alpha * policy + (1 - alpha) * auxiliary (an EMA teacher)."""
        ...

    def discard(self) -> None:
        """Drop everything scored since the last update (a step that failed before its update)."""
        ...

    def checkpoint(self, directory: Path) -> CheckpointFile:
        """Write weights, optimiser state, KL reference and auxiliary models to ``checkpoint_file(directory,
        name)`` from where the agent lives (fsynced before it returns); returns what was written, by whom.
        ``directory`` must be reachable from the agent's process: on a multi-node cluster, a shared filesystem."""
        ...

    def restore(self, directory: Path) -> None:
        """Read back what :meth:`checkpoint` wrote into ``directory`` (the rollout engines follow the weights)."""
        ...

    def save(self, path: Path) -> None:
        """The policy as a ``save_pretrained`` folder at ``path`` (LoRA adapters merged)."""
        ...


def boundary_calls(protocol: type) -> tuple[str, ...]:
    """The public methods a protocol declares, in declaration order (its data members are not calls)."""
    return tuple(n for n, v in vars(protocol).items() if callable(v) and not n.startswith("_"))


#: the names of the calls of :class:`AgentHandle`, in declaration order
BOUNDARY: tuple[str, ...] = boundary_calls(AgentHandle)


class Started(Protocol):
    """A call started on an agent: :meth:`result` waits for it and returns its result (or raises its error)."""

    def result(self) -> Any:
        ...


@runtime_checkable
class Submitting(Protocol):
    """A handle that can start a call and return before it finishes (a Ray actor's handle): ``submit("score",
    samples)`` is ``score(samples)`` started; the name must be in :data:`BOUNDARY`."""

    def submit(self, call: str, *args: Any, **kwargs: Any) -> Started:
        ...


class _Starter:
    """A :class:`Submitting` handle seen through the boundary's calls, each returning its :class:`Started` call at
    once: ``_Starter(h).score(samples)`` is ``h.submit("score", samples)``."""

    def __init__(self, handle: Submitting) -> None:
        self._handle = handle
        self.name: str = getattr(handle, "name")
        self.spec: Any = getattr(handle, "spec", None)

    def __getattr__(self, call: str) -> Callable[..., Started]:
        if call not in BOUNDARY:
            raise AttributeError(f"{call} is not part of the agent boundary ({', '.join(BOUNDARY)})")
        handle = self._handle
        return lambda *args, **kwargs: handle.submit(call, *args, **kwargs)


class AgentGroup:
    """The agents of one run, called together: each method makes the same call on every agent (or on those a
    mapping names, in cohort order) and returns ``{agent name: result}``.

    Handles that can start a call without waiting (:class:`Submitting`: Ray actors) all start before any is
    waited for, so the agents work at the same time; in-process agents run one after another. Either way each
    agent sees the same calls in the same order, so the results are the same. When a started call fails, the
    first failure in cohort order is raised once every started call has finished; an in-process agent's
    failure is raised at once."""

    def __init__(self, agents: Sequence[AgentHandle]) -> None:
        self.agents: list[AgentHandle] = list(agents)
        names = [a.name for a in self.agents]
        if len(set(names)) != len(names):
            raise ValueError(f"agent names must be unique in a cohort, got {names}")
        self.by_name: dict[str, AgentHandle] = dict(zip(names, self.agents))

    @classmethod
    def of(cls, agents: AgentGroup | Sequence[AgentHandle]) -> AgentGroup:
        """``agents`` as a group (a group is returned as it is)."""
        return agents if isinstance(agents, AgentGroup) else cls(agents)

    def __iter__(self) -> Iterator[AgentHandle]:
        return iter(self.agents)

    def __len__(self) -> int:
        return len(self.agents)

    @property
    def names(self) -> list[str]:
        return [a.name for a in self.agents]

    def _named(self, names: Mapping[str, Any] | None) -> list[AgentHandle]:
        """The agents ``names`` names (every agent when None), in cohort order; KeyError for a name not here."""
        if names is None:
            return self.agents
        unknown = sorted(set(names) - set(self.by_name))
        if unknown:
            raise KeyError(f"no agent {unknown[0]!r} in this cohort ({', '.join(self.by_name)})")
        return [a for a in self.agents if a.name in names]

    def _each(self, call: Callable[[AgentHandle], T], names: Mapping[str, Any] | None = None) -> dict[str, T]:
        """``{name: call(agent)}`` for the agents ``names`` names (all when None): submitted to every
        :class:`Submitting` agent before any result is waited for (see the class docstring)."""
        agents = self._named(names)
        started: list[Started | None] = [call(_Starter(a)) if isinstance(a, Submitting) else None  # type: ignore
                                         for a in agents]
        out: dict[str, T] = {}
        error: BaseException | None = None
        for a, pending in zip(agents, started):
            if pending is None:
                out[a.name] = call(a)
                continue
            try:
                out[a.name] = pending.result()
            except BaseException as e:  # noqa: BLE001 - re-raised below, after the others have finished
                error = error or e
        if error is not None:
            raise error
        return out

    # ------------------------------------------------------------------ the boundary's calls, per agent
    def generate(self, requests: Mapping[str, Sequence[Prompt]], params: Mapping[str, SamplingParams], *,
                 model: str = POLICY) -> dict[str, list[list[Completion]]]:
        """Rollouts of the agents ``requests`` names: agent -> [P][N] completions of its P requests, with its own
        sampling settings ``params[agent]`` (its seed), from its policy or its auxiliary model ``model``."""
        return self._each(lambda a: a.generate(requests[a.name], params[a.name], model=model), requests)

    def score(self, samples: Mapping[str, Sequence[TrainSample]]) -> dict[str, SampleStats]:
        """The training forward pass of the agents ``samples`` names (an agent with nothing to score is left out):
        agent -> per-sample statistics of its S samples."""
        return self._each(lambda a: a.score(samples[a.name]), samples)

    def explore(self, unlearn: Mapping[str, Sequence[tuple[Prompt, str]]], requests: Mapping[str, Sequence[Prompt]],
                params: Mapping[str, SamplingParams], *, model: str, lr: Mapping[str, float], eps: float = 0.01
                ) -> dict[str, list[list[Completion]]]:
        """The explorer pools of the agents ``requests`` names (each at its own ``lr[agent]``): agent -> [P][N]."""
        return self._each(lambda a: a.explore(unlearn[a.name], requests[a.name], params[a.name], model=model,
                                              lr=lr[a.name], eps=eps), requests)

    def likelihood(self, requests: Mapping[str, Sequence[Prompt]], texts: Mapping[str, Sequence[str]]
                   ) -> dict[str, list[float]]:
        """Each agent ``requests`` names scores ``texts[agent]`` as replies to its requests (mean log-probability
        of each text under its policy): agent -> S floats."""
        return self._each(lambda a: a.likelihood(requests[a.name], texts[a.name]), requests)

    def update(self, advantages: Mapping[str, Sequence[float]], max_len: int | None = None
               ) -> dict[str, UpdateStats]:
        """One optimiser step of each agent ``advantages`` names, one advantage per sample it scored."""
        return self._each(lambda a: a.update(advantages[a.name], max_len=max_len), advantages)

    def update_auxiliary(self, name: str, alpha: float) -> None:
        """Every agent's auxiliary model ``name`` moves toward its policy by ``alpha`` (EMA)."""
        self._each(lambda a: a.update_auxiliary(name, alpha))

    def discard(self) -> None:
        """Every agent drops what it scored since its last update."""
        self._each(lambda a: a.discard())

    def checkpoint(self, directory: Path) -> dict[str, CheckpointFile]:
        """Every agent writes its state to ``directory/agent-<name>.pt`` from its own process (see
        :meth:`AgentHandle.checkpoint`: on a multi-node cluster ``directory`` is on a shared filesystem); agent ->
        what it wrote, by whom."""
        return self._each(lambda a: a.checkpoint(directory))

    def restore(self, directory: Path) -> None:
        """Every agent reads its state back from ``directory/agent-<name>.pt``."""
        self._each(lambda a: a.restore(directory))

    def save(self, paths: Mapping[str, Path]) -> None:
        """The policy of each agent ``paths`` names as a ``save_pretrained`` folder at ``paths[agent]``."""
        self._each(lambda a: a.save(paths[a.name]), paths)
