"""The training loop: one controller, N agents, one method. It reads top to bottom like one step::

    prompts (same problems, same order for every agent; each agent sees its own view)
      -> each agent generates completions               (rollout engine, per-agent seed)
      -> answers extracted once                          (the verifier, shared with evaluation)
      -> one training forward pass per agent             (log-probs, entropy, self-certainty: one pass)
      -> method.rewards(batch) -> rewards per agent      (the hidden truth only if method.uses_labels)
      -> group-normalised advantages per agent           (GRPO core, unless the method overrides them)
      -> one policy update per agent
      -> diagnostics logged; sample logs every N steps
"""

from __future__ import annotations

import logging
import random
import time
import zlib
from dataclasses import dataclass, field
from itertools import count, islice
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from corl_bench.config import Config, ConfigError
from corl_bench.registries import EXTRACTORS
from corl_bench.grading.verifier import extract_normalized, plurality_vote
from corl_bench.method import AgentRollouts, Generate, Method, RewardInput, SequenceStats
from corl_bench.profile import render_for, stop_for
from corl_bench.results import RunDir, append_jsonl
from corl_bench.rollout import SamplingParams, as_request, prompt_text
from corl_bench.train import grpo
from corl_bench.train.agent import NumericalError, TrainSample, check_finite
from corl_bench.train.diagnostics import agent_diagnostics

log = logging.getLogger(__name__)


def rollout_seed(run_seed: int, seed_offset: int, step: int) -> int:
    """Per-agent, per-step sampling seed: agents never share rollout randomness, reruns reproduce it."""
    return (run_seed * 1_000_003 + seed_offset * 7_919 + step * 104_729 + 17) % (2**31)


def _rows(flat: list[float], k: int) -> list[list[float]]:
    """[P*K] -> [P][K] (row-major, as the samples were scored)."""
    return [flat[i: i + k] for i in range(0, len(flat), k)]


def _rollouts(agent: str, rows: list[list[Any]], extract: Callable[[str], Any] = extract_normalized
              ) -> AgentRollouts:
    """Completions [P][N] -> what a method sees: extracted answers (once, by the shared verifier with
    ``rollout.extractor``), texts, finished."""
    return AgentRollouts(agent=agent, answers=[[extract(c.text) for c in row] for row in rows],
                         completions=[[c.text for c in row] for row in rows],
                         finished=[[c.finished for c in row] for row in rows])


def each(agents: list[Any], call: Callable[[Any], tuple[str, tuple, dict]]) -> dict[str, Any]:
    """Run one call per agent, ``call(agent) -> (method, args, kwargs)``; returns {agent name: result}.

    Agents that can start a call without waiting (:class:`corl_bench.train.actors.RayAgent`: ``submit``) all start
    before any is waited for, so they run at the same time; in-process agents run one after another. Either way
    each agent sees the same calls in the same order, so the results are the same. The first agent's exception (in
    cohort order) is raised after every started call has finished."""
    started = []
    for a in agents:
        method, args, kwargs = call(a)
        submit = getattr(a, "submit", None)
        started.append((a.name, submit(method, *args, **kwargs) if submit is not None else None, (a, method, args,
                                                                                                  kwargs)))
    out: dict[str, Any] = {}
    error: BaseException | None = None
    for name, pending, (a, method, args, kwargs) in started:
        try:
            out[name] = pending.result() if pending is not None else getattr(a, method)(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 - re-raised below, after the others have finished
            if pending is None:
                raise
            error = error or e
    if error is not None:
        raise error
    return out


def step_rows(result: "StepResult") -> list[dict[str, Any]]:
    """A step's metrics.jsonl rows: one per agent, its metrics and the step's timings (what trackers mirror too)."""
    return [{"step": result.step, "agent": name, **vals, **{f"time/{k}": v for k, v in result.seconds.items()}}
            for name, vals in result.metrics.items()]


@dataclass
class StepResult:
    step: int
    metrics: dict[str, dict[str, float | None]]  # agent -> diagnostics
    samples: list[dict[str, Any]] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)


class Trainer:
    """Runs the training steps of one run; evaluation and bookkeeping live in :mod:`corl_bench.train.runner`."""

    def __init__(self, cfg: Config, agents: list[Any], method: Method, profile: Any, run_dir: Path) -> None:
        """``agents``: objects with the plain-data agent boundary (:class:`corl_bench.train.agent.Agent`, or a proxy
        to one in another process); ``profile``: a :class:`corl_bench.profile.Profile`."""
        self.cfg = cfg
        self.agents = agents
        self.method = method
        self.profile = profile
        self.run_dir = run_dir
        self.stream: Iterator[Any] = self._training_stream()
        self.consumed = 0  # problems taken from the stream so far (the data position a checkpoint records)

    def state_dict(self) -> dict[str, Any]:
        return {"consumed": self.consumed, "method": self.method.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the data position (the seeded stream is replayed to it) and the method's state."""
        self.stream = self._training_stream()
        skipped = sum(1 for _ in islice(self.stream, state["consumed"]))
        if skipped != state["consumed"]:
            raise RuntimeError(f"the training stream ended after {skipped} problems; the checkpoint is at "
                               f"{state['consumed']}")
        self.consumed = skipped
        self.method.load_state_dict(state.get("method") or {})

    def _training_stream(self) -> Iterator[Any]:
        """The profile's stream, or (``data.train_pool`` = N) its first N problems in epochs, each epoch
        shuffled by ``Random((run seed, epoch))`` so that a resumed run replays exactly the same order."""
        seed, pool_size = self.cfg.run.seed, self.cfg.data.train_pool
        stream = self.profile.training_problems(seed)
        if not pool_size:
            return stream
        pool = list(islice(stream, pool_size))
        if len(pool) < pool_size:
            raise ConfigError(f"data.train_pool={pool_size} but the training set has {len(pool)} problems; "
                              f"set data.train_pool={len(pool)} or less")

        def epochs() -> Iterator[Any]:
            for epoch in count():
                order = list(range(len(pool)))
                random.Random(f"{seed}:{epoch}").shuffle(order)
                yield from (pool[i] for i in order)

        return epochs()

    def step(self, step: int) -> StepResult:
        cfg, k = self.cfg, self.cfg.rollout.samples_per_prompt
        problems = list(islice(self.stream, cfg.rollout.prompts_per_step))
        self.consumed += len(problems)
        truth = [p.answer for p in problems]
        timer: dict[str, float] = {}

        # 1. rollouts: same problems for everyone, each agent in its own view and with its own seed; then the
        #    rollouts of every auxiliary model that generates (an EMA teacher), each on its own seed stream
        t0 = time.perf_counter()
        requests = {a.name: [render_for(self.profile, p, a.spec) for p in problems] for a in self.agents}
        n = self.method.generation_n(k)
        comps = each(self.agents, lambda a: ("generate", (requests[a.name], self._params(n, a, step, 0)), {}))
        extract = EXTRACTORS.get(self.cfg.rollout.extractor)
        rollouts = {name: _rollouts(name, rows, extract) for name, rows in comps.items()}
        aux_rollouts: dict[str, dict[str, AgentRollouts]] = {}
        for aux in (x for x in self.method.auxiliary if x.generates):
            rows = each(self.agents, lambda a: ("generate", (requests[a.name], self._params(k, a, step, aux.seed_salt)),
                                                {"model": aux.name}))
            aux_rollouts[aux.name] = {name: _rollouts(name, r, extract) for name, r in rows.items()}
        timer["rollout"] = time.perf_counter() - t0

        # 2. one training-side forward pass per agent over its first K rollouts of every prompt; the agent keeps
        #    the graph and returns detached statistics (entropy, self-certainty) for intrinsic rewards
        t0 = time.perf_counter()
        train = {a.name: [TrainSample(req, row[j]) for req, row in zip(requests[a.name], comps[a.name])
                          for j in range(k)] for a in self.agents}
        scored = each(self.agents, lambda a: ("score", (train[a.name],), {}))
        stats = {name: SequenceStats(entropy=_rows(s.entropy, k), self_certainty=_rows(s.self_certainty, k))
                 for name, s in scored.items()}
        timer["forward"] = time.perf_counter() - t0

        try:
            return self._reward_and_update(step, problems, truth, requests, comps, rollouts, aux_rollouts, train,
                                           stats, timer)
        except BaseException:
            for a in self.agents:  # nothing was updated: drop every scored batch
                a.discard()
            raise

    def _reward_and_update(self, step, problems, truth, requests, comps, rollouts, aux_rollouts, train, stats,
                           timer) -> StepResult:
        cfg, k = self.cfg, self.cfg.rollout.samples_per_prompt
        # 3. rewards: the method sees answers and policy statistics; labels only if it declares uses_labels
        t0 = time.perf_counter()
        batch = RewardInput(step=step, problem_ids=[p.id for p in problems], rollouts=rollouts,
                            samples_per_prompt=k, labels=truth if self.method.uses_labels else None, stats=stats,
                            auxiliary_rollouts=aux_rollouts or None, prompts=requests, generate=self._generator(step))
        rewards = self.method.rewards(batch)
        votes = {name: [plurality_vote(ans) for ans in ro.answers] for name, ro in rollouts.items()}
        timer["reward"] = time.perf_counter() - t0

        # 3b. samples a method generated on top (CoMAS critiques and scores) join their author's update
        t0 = time.perf_counter()
        lengths = {}
        with_extra = [a for a in self.agents if rewards[a.name].extra]
        each(with_extra, lambda a: ("score", ([TrainSample(as_request(e.prompt), e.completion)
                                               for e in rewards[a.name].extra],), {}))
        for a in self.agents:
            lengths[a.name] = [len(s.completion.token_ids) for s in train[a.name]] + [len(e.completion.token_ids)
                                                                                     for e in rewards[a.name].extra]
        override = self.method.advantages(batch, rewards, lengths)
        timer["forward"] += time.perf_counter() - t0

        # 4. advantages for every agent (all checked finite before any agent is updated), then one update each;
        #    auxiliary models (an EMA teacher) follow the updated policy at the rate the method gives
        t0 = time.perf_counter()
        result = StepResult(step=step, metrics={})
        r_of, adv_of = {}, {}
        for a in self.agents:
            r_of[a.name] = r = torch.tensor(rewards[a.name].rewards, dtype=torch.float32)  # (P, K)
            check_finite(r, "rewards", a.name, step)
            adv_of[a.name] = self._advantages(a.name, r, rewards, override, lengths)
            check_finite(adv_of[a.name], "advantages", a.name, step)
        try:
            updates = each(self.agents, lambda a: ("update", (adv_of[a.name].tolist(),),
                                                   {"max_len": cfg.rollout.max_new_tokens}))
        except NumericalError as e:
            raise NumericalError(e.quantity, e.agent, step, e.detail) from None
        for aux in self.method.auxiliary:
            alpha = self.method.auxiliary_update(aux.name, step, cfg.run.steps)
            if alpha:
                each(self.agents, lambda a: ("update_auxiliary", (aux.name, alpha), {}))
        for a in self.agents:
            upd = updates[a.name]
            result.metrics[a.name] = agent_diagnostics(
                rollouts=rollouts[a.name], rewards=rewards[a.name], truth=truth, k=k, own_votes=votes[a.name],
                other_votes={o.name: votes[o.name] for o in self.agents if o.name != a.name},
                lengths=lengths[a.name][: len(train[a.name])], update=upd,
                zero_std_fraction=grpo.zero_std_fraction(r_of[a.name]))
        timer["update"] = time.perf_counter() - t0
        result.seconds = timer

        every = cfg.run.log_samples_every
        if every and (step % every == 0 or step == cfg.run.steps - 1):
            result.samples = self._samples(step, problems, requests, comps, rollouts, rewards, truth)
        return result

    def _params(self, n: int, agent: Any, step: int, salt: int) -> SamplingParams:
        """Sampling settings of the run with the seed of (agent, step) on the stream ``salt`` (0: the policy's)."""
        r = self.cfg.rollout
        return SamplingParams(n=n, temperature=r.temperature, top_p=r.top_p, max_new_tokens=r.max_new_tokens,
                              seed=rollout_seed(self.cfg.run.seed, agent.spec.seed_offset + salt, step),
                              stop=stop_for(self.profile, agent.spec))

    def _advantages(self, name: str, r: torch.Tensor, rewards: dict[str, Any], override: dict[str, Any] | None,
                    lengths: dict[str, list[int]]) -> torch.Tensor:
        """(N,) advantages of one agent: the method's override, else GRPO group advantages of its (P, K) rewards."""
        if override is not None and name in override:
            adv = torch.as_tensor(override[name], dtype=torch.float32).reshape(-1)
            if adv.numel() != len(lengths[name]):
                raise RuntimeError(f"{type(self.method).__name__}.advantages gave {adv.numel()} advantages for "
                                   f"agent {name}, which trains on {len(lengths[name])} samples")
            return adv
        if rewards[name].extra:
            raise RuntimeError(f"{type(self.method).__name__} returned extra samples for agent {name} but no "
                               "advantages for them; override Method.advantages")
        return grpo.group_advantages(r, scale_std=self.cfg.grpo.scale_std, eps=self.cfg.grpo.adv_eps).reshape(-1)

    def _generator(self, step: int) -> Generate:
        """Extra generations for interactive methods: same engine and sampling settings, a seed per (agent, role)."""
        by_name = {a.name: a for a in self.agents}
        cfg = self.cfg.rollout

        def generate(agent: str, prompts: list[Any], role: str, max_new_tokens: int | None = None) -> list[Any]:
            a = by_name[agent]
            salt = 2_000 + zlib.crc32(role.encode()) % 100_000
            params = SamplingParams(n=1, temperature=cfg.temperature, top_p=cfg.top_p,
                                    max_new_tokens=max_new_tokens or cfg.max_new_tokens,
                                    seed=rollout_seed(self.cfg.run.seed, a.spec.seed_offset + salt, step))
            return [row[0] for row in a.generate(prompts, params)] if prompts else []

        return generate

    def _samples(self, step, problems, prompts, comps, rollouts, rewards, truth) -> list[dict[str, Any]]:
        rows = []
        for a in self.agents:
            for i in range(min(self.cfg.run.samples_per_log, len(problems))):
                labels = rewards[a.name].pseudo_labels
                rows.append({"step": step, "agent": a.name, "problem_id": problems[i].id, "view": a.spec.view,
                             "prompt": prompt_text(prompts[a.name][i]), "completion": comps[a.name][i][0].text,
                             "extracted": rollouts[a.name].answers[i][0],
                             "pseudo_label": labels[i] if labels is not None else None,
                             "truth": truth[i], "reward": rewards[a.name].rewards[i][0]})
        return rows

    def write(self, result: StepResult) -> None:
        append_jsonl(RunDir(self.run_dir).metrics_path, step_rows(result))
        if result.samples:
            append_jsonl(RunDir(self.run_dir).samples_path, result.samples)
