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

import dataclasses
import logging
import time
import zlib
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import torch

from corl_bench.advantages import group_advantages
from corl_bench.config import Config, ConfigError
from corl_bench.registries import EXTRACTORS
from corl_bench.grading.verifier import extract_normalized, plurality_vote
from corl_bench.method import AgentRollouts, Generate, Method, RewardInput, SequenceStats
from corl_bench.profile import pooled, render_for, stop_for
from corl_bench.results import RunDir, append_jsonl
from corl_bench.rollout import Completion, Prompt, SamplingParams, as_request, prompt_text
from corl_bench.train import grpo
from corl_bench.train.agent import NumericalError, check_finite
from corl_bench.train.boundary import AgentGroup, AgentHandle, TrainSample
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
    ``rollout.extractor``), texts, finished, token counts."""
    return AgentRollouts(agent=agent, answers=[[extract(c.text) for c in row] for row in rows],
                         completions=[[c.text for c in row] for row in rows],
                         finished=[[c.finished for c in row] for row in rows],
                         n_tokens=[[c.n_tokens for c in row] for row in rows])


def step_rows(result: "StepResult") -> list[dict[str, Any]]:
    """A step's metrics.jsonl rows: one per agent, its metrics and the step's timings (what trackers mirror too)."""
    return [{"step": result.step, "agent": name, **vals, **{f"time/{k}": v for k, v in result.seconds.items()}}
            for name, vals in result.metrics.items()]


@dataclass(frozen=True)
class Scored:
    """The first half of a step (rollouts and the training forward pass), handed to the reward and update half.
    P = prompts of the step, K = ``rollout.samples_per_prompt``, N = completions generated per prompt (>= K)."""

    step: int
    problems: list[Any]  # [P] the step's problems
    truth: list[Any]  # [P] their hidden answers
    requests: dict[str, list[Prompt]]  # agent -> [P] its rendering of the problems
    comps: dict[str, list[list[Completion]]]  # agent -> [P][N] its completions
    rollouts: dict[str, AgentRollouts]  # agent -> what a method sees of comps
    aux_rollouts: dict[str, dict[str, AgentRollouts]]  # auxiliary model -> agent -> its rollouts (may be empty)
    train: dict[str, list[TrainSample]]  # agent -> [P*K] the samples it scored, row-major
    stats: dict[str, SequenceStats]  # agent -> (P, K) entropy and self-certainty of those samples


@dataclass
class StepResult:
    step: int
    metrics: dict[str, dict[str, float | None]]  # agent -> diagnostics
    samples: list[dict[str, Any]] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)


def _role_salt(role: str) -> int:
    """The seed stream of a method's extra generations in ``role`` (never the policy's rollouts' stream, 0)."""
    return 2_000 + zlib.crc32(role.encode()) % 100_000


class Trainer:
    """Runs the training steps of one run; evaluation and bookkeeping live in :mod:`corl_bench.train.runner`."""

    def __init__(self, cfg: Config, agents: AgentGroup | Sequence[AgentHandle], method: Method, profile: Any,
                 run_dir: Path) -> None:
        """``agents``: :class:`corl_bench.train.boundary.AgentHandle` s (:class:`corl_bench.train.agent.Agent`, or a
        handle on one in another process), or their group; ``profile``: a :class:`corl_bench.profile.Profile`."""
        self.cfg = cfg
        self.group = AgentGroup.of(agents)
        self.agents: list[AgentHandle] = self.group.agents
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
        """The profile's stream as the run trains on it (:func:`corl_bench.profile.pooled`: ``data.train_pool``)."""
        return pooled(self.profile.training_problems(self.cfg.run.seed), self.cfg.run.seed, self.cfg.data.train_pool)

    def step(self, step: int) -> StepResult:
        cfg, k = self.cfg, self.cfg.rollout.samples_per_prompt
        problems = list(islice(self.stream, cfg.rollout.prompts_per_step))
        if len(problems) < cfg.rollout.prompts_per_step:  # never a short or empty step (verl PR#5725)
            raise ConfigError(f"the training stream ended at step {step} after {self.consumed + len(problems)} "
                              f"problems (this step needs {cfg.rollout.prompts_per_step}); the profile's "
                              "training_problems must not end: set data.train_pool to read its first N in epochs")
        self.consumed += len(problems)
        truth = [p.answer for p in problems]
        timer: dict[str, float] = {}

        # 1. rollouts: same problems for everyone, each agent in its own view and with its own seed; then the
        #    rollouts of every auxiliary model that generates (an EMA teacher), each on its own seed stream
        t0 = time.perf_counter()
        requests = {a.name: [render_for(self.profile, p, a.spec) for p in problems] for a in self.agents}
        n = self.method.generation_n(k)
        comps = self.group.generate(requests, {a.name: self._params(n, a, step, 0) for a in self.agents})
        extract = EXTRACTORS.get(self.cfg.rollout.extractor)
        rollouts = {name: _rollouts(name, rows, extract) for name, rows in comps.items()}
        aux_rollouts: dict[str, dict[str, AgentRollouts]] = {}
        for aux in (x for x in self.method.auxiliary if x.generates and x.rollouts):
            rows = self.group.generate(requests, {a.name: self._params(k, a, step, aux.seed_salt)
                                                  for a in self.agents}, model=aux.name)
            aux_rollouts[aux.name] = {name: _rollouts(name, r, extract) for name, r in rows.items()}
        timer["rollout"] = time.perf_counter() - t0

        # 2. one training-side forward pass per agent over its first K rollouts of every prompt; the agent keeps
        #    the graph and returns detached statistics (entropy, self-certainty) for intrinsic rewards
        t0 = time.perf_counter()
        train = {a.name: [TrainSample(req, row[j]) for req, row in zip(requests[a.name], comps[a.name])
                          for j in range(k)] for a in self.agents}
        scored = self.group.score(train)
        stats = {name: SequenceStats(entropy=_rows(s.entropy, k), self_certainty=_rows(s.self_certainty, k))
                 for name, s in scored.items()}
        timer["forward"] = time.perf_counter() - t0

        try:
            return self._reward_and_update(Scored(step=step, problems=problems, truth=truth, requests=requests,
                                                  comps=comps, rollouts=rollouts, aux_rollouts=aux_rollouts,
                                                  train=train, stats=stats), timer)
        except BaseException:
            self.group.discard()  # nothing was updated: drop every scored batch
            raise

    def _reward_and_update(self, s: Scored, timer: dict[str, float]) -> StepResult:
        """Steps 3 and 4 of the module docstring: rewards, advantages and one update per agent (``timer`` gets
        the reward, forward and update seconds)."""
        cfg, k, step = self.cfg, self.cfg.rollout.samples_per_prompt, s.step
        # 3. rewards: the method sees answers and policy statistics; labels only if it declares uses_labels
        t0 = time.perf_counter()
        batch = RewardInput(step=step, problem_ids=[p.id for p in s.problems], rollouts=s.rollouts,
                            samples_per_prompt=k, labels=s.truth if self.method.uses_labels else None,
                            stats=s.stats, auxiliary_rollouts=s.aux_rollouts or None, prompts=s.requests,
                            generate=self._generator(step), extract=EXTRACTORS.get(cfg.rollout.extractor),
                            likelihood=self.group.likelihood, follow_up=self._follow_up,
                            explore=self._explorer(step))
        rewards = self.method.rewards(batch)
        votes = {name: [plurality_vote(ans) for ans in ro.answers] for name, ro in s.rollouts.items()}
        timer["reward"] = time.perf_counter() - t0

        # 3b. samples a method generated on top (CoMAS critiques and scores) join their author's update
        t0 = time.perf_counter()
        self.group.score({a.name: [TrainSample(as_request(e.prompt), e.completion) for e in rewards[a.name].extra]
                          for a in self.agents if rewards[a.name].extra})
        lengths = {a.name: [len(x.completion.token_ids) for x in s.train[a.name]] +
                   [len(e.completion.token_ids) for e in rewards[a.name].extra] for a in self.agents}
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
            updates = self.group.update({name: adv.tolist() for name, adv in adv_of.items()},
                                        max_len=cfg.rollout.max_new_tokens)
        except NumericalError as e:
            raise NumericalError(e.quantity, e.agent, step, e.detail) from None
        for aux in self.method.auxiliary:
            alpha = self.method.auxiliary_update(aux.name, step, cfg.run.steps)
            if alpha:
                self.group.update_auxiliary(aux.name, alpha)
        for a in self.agents:
            result.metrics[a.name] = agent_diagnostics(
                rollouts=s.rollouts[a.name], rewards=rewards[a.name], truth=s.truth, k=k, own_votes=votes[a.name],
                other_votes={o.name: votes[o.name] for o in self.agents if o.name != a.name},
                lengths=lengths[a.name][: len(s.train[a.name])], update=updates[a.name],
                zero_std_fraction=grpo.zero_std_fraction(r_of[a.name]))
        timer["update"] = time.perf_counter() - t0
        result.seconds = timer

        every = cfg.run.log_samples_every
        if every and (step % every == 0 or step == cfg.run.steps - 1):
            result.samples = self._samples(step, s.problems, s.requests, s.comps, s.rollouts, rewards, s.truth)
        return result

    def _params(self, n: int, agent: AgentHandle, step: int, salt: int) -> SamplingParams:
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
        return group_advantages(r, scale_std=self.cfg.grpo.scale_std, eps=self.cfg.grpo.adv_eps).reshape(-1)

    def _explorer(self, step: int) -> Callable[..., dict[str, list[list[Completion]]]]:
        """RewardInput.explore: explorer pools through the agents' auxiliary models (the run's sampling settings, a
        seed of their own per (agent, step))."""
        def explore(model: str, unlearn: dict[str, list[tuple[Any, str]]], requests: dict[str, list[Any]],
                    n: int, lr: dict[str, float], eps: float = 0.01) -> dict[str, list[list[Completion]]]:
            params = {a.name: self._params(n, a, step, _role_salt(f"explore:{model}"))
                      for a in self.agents if a.name in requests}
            pairs = {name: [(as_request(q), text) for q, text in unlearn.get(name, [])] for name in requests}
            return self.group.explore(pairs, requests, params, model=model, lr=lr, eps=eps)

        return explore

    def _follow_up(self, agent: str, request: Any, reply: str, user: str) -> Any:
        """RewardInput.follow_up: ``agent``'s conversation continued by the run's profile in its own template."""
        spec = next(a.spec for a in self.agents if a.name == agent)
        return self.profile.follow_up(as_request(request), reply, user, model=spec.family, prompt=spec.prompt)

    def _generator(self, step: int) -> Generate:
        """Extra generations for interactive methods: same engine and sampling settings (the agent's stop strings
        included: a few-shot agent's debate turn stops where its rollouts do), a seed per (agent, role)."""
        by_name = {a.name: a for a in self.agents}

        def generate(agent: str, prompts: list[Any], role: str, max_new_tokens: int | None = None) -> list[Any]:
            a = by_name[agent]
            params = self._params(1, a, step, _role_salt(role))
            if max_new_tokens:
                params = dataclasses.replace(params, max_new_tokens=max_new_tokens)
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
