"""CoMAS (Xue et al., arXiv 2510.08529): agents solve, critique and score each other; rewards come from the scores.

Follows the only retrievable code, the fork ``wt-2048/comas`` of ``xxyQwQ/CoMAS`` (``marti/worlds/workflows/comas.py``,
``marti/verifiers/comas_reward.py``; methods.md section 8). Per problem and discussion, in every round:

1. **solver** — every agent writes a solution (round 1: the plain problem prompt, i.e. the agent's K main rollouts,
   one discussion each; round r > 1: the problem plus ``references`` randomly chosen (solution, evaluation) pairs
   of the same discussion slot from round r-1);
2. **evaluator** — for every solution, an agent drawn from a shuffled, balanced list (each agent critiques equally
   often; it may be the solver itself) writes a critique;
3. **scorer** — an agent drawn from a second shuffled, balanced list reads problem, solution and critique and
   answers with an integer 1-3 in ``<score>`` tags.

With ``s_hat = (s - 1) / 2``: solver reward ``s_hat``, evaluator ``1 - s_hat`` (zero-sum), scorer 0; an unparsable
score gives the scorer -1 and solver and evaluator 0. Every generated step is one training sample of the agent
that wrote it. There are no GRPO groups: advantages are REINFORCE++ (reward on the last token, gamma 1, no KL in
the reward) **whitened over all of the agent's samples, token-weighted** (:func:`corl_bench.advantages.whitened_advantages`),
through the :meth:`advantages` hook. All extra generations go through the agents' rollout engines with the run's
sampling settings. No labels are used (the hidden truth only feeds the harness's monitoring).

Deviations, all forced by the harness or the micro profile:
* agents = the cohort's agents (the reference uses 4 copies of one model); K discussions per problem (reference 4);
* ``rounds`` defaults to 1 (reference 2, ``references`` 2): the micro models have 128 positions and a round-2
  solver prompt with two references does not fit; ``--set method.options.rounds=2`` runs the reference schedule;
* the evaluator/scorer prompts are short paraphrases of the reference templates (same roles and 1-3 standards),
  without a chat template, for the same reason; round 1 omits the reference's "(Empty discussion)" block;
* ``score_parser``: ``strict`` (default) accepts only ``<score>n</score>`` (clamped to 1..3), so an unparsable
  score earns the -1 that the reward defines; ``fork`` adds the fork's fallbacks (last standalone 1/2/3, else 2),
  which make the -1 unreachable (methods.md flags this as a local modification of the fork).

With vision-language agents every prompt that states the problem (critique, score, a later round's solution) carries
the problem's images (``Request(text, images)``, taken from the solver's request), so a judge sees what the solver
saw; text prompts stay plain strings.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

from corl_bench.method import (METHODS, AgentRewards, ExtraSample, Method, Request, RewardInput, prompt_text,
                               whitened_advantages)

EVALUATOR_TEMPLATE = ("Problem: {problem}\nSolution: {solution}\n"
                      "Point out every error in the solution, briefly.\nEvaluation:")
SCORER_TEMPLATE = ("Problem: {problem}\nSolution: {solution}\nEvaluation: {evaluation}\n"
                   "Score the solution: 3 correct, 2 minor mistakes, 1 fatal mistake. Answer <score>n</score>.\n")
SOLVER_TEMPLATE = "{problem}\nDiscussion:\n{discussion}\nYour solution:\n"

_TAG = re.compile(r"<\s*score\s*>\s*([0-9]+)\s*<\s*/\s*score\s*>", re.IGNORECASE)
_DIGIT = re.compile(r"\b([1-3])\b")


def parse_score(text: str, parser: str = "strict") -> int | None:
    """The 1-3 score in ``text`` (tag value clamped to 1..3); None when unparsable (``strict`` only)."""
    m = _TAG.search(text or "")
    if m:
        return min(3, max(1, int(m.group(1))))
    if parser == "fork":
        digits = _DIGIT.findall(text or "")
        return int(digits[-1]) if digits else 2
    return None


def with_images(text: str, images: tuple[Any, ...]) -> str | Request:
    """A prompt about a problem: ``text`` with the problem's ``images`` as a :class:`Request`; plain text when the
    problem has none (a text run's prompts stay exactly what they were)."""
    return Request(text=text, images=images) if images else text


def role_rewards(score: int | None) -> tuple[float, float, float]:
    """(solver, evaluator, scorer) rewards of one discussion (``comas_reward.py``)."""
    if score is None:
        return 0.0, 0.0, -1.0
    s_hat = (score - 1.0) / 2.0
    return s_hat, 1.0 - s_hat, 0.0


@dataclass(frozen=True)
class CoMASOptions:
    rounds: int = 1
    """discussion rounds per step (reference 2; see the module docstring)"""
    references: int = 2
    """(solution, evaluation) pairs of the previous round shown to a round r > 1 solver"""
    score_parser: str = "strict"
    """strict (only <score>n</score>; else scorer -1) | fork (fallbacks: last standalone 1/2/3, else 2)"""
    score_max_tokens: int = 16
    """token cap of a scorer's answer"""

    def __post_init__(self) -> None:
        if self.rounds < 1:
            raise ValueError(f"rounds must be >= 1 (got {self.rounds})")
        if self.references < 1:
            raise ValueError(f"references must be >= 1 (got {self.references})")
        if self.score_parser not in ("strict", "fork"):
            raise ValueError(f"score_parser must be strict or fork (got {self.score_parser!r})")
        if self.score_max_tokens < 1:
            raise ValueError(f"score_max_tokens must be >= 1 (got {self.score_max_tokens})")


@METHODS.register("comas")
class CoMAS(Method):
    """CoMAS: solver/evaluator/scorer interaction rewards among the agents, REINFORCE++ whitened advantages."""

    name = "comas"
    label = "CoMAS"
    table_order = 80
    min_agents = 2
    uses_labels = False
    extra_cost = ("2 generations (critique, score) per rollout per round, +1 solution per rollout in rounds > 1; "
                  "the agents are the judges")
    reference = ("CoMAS, arXiv 2510.08529; fork wt-2048/comas marti/worlds/workflows/comas.py, "
                 "marti/verifiers/comas_reward.py")
    Options = CoMASOptions

    def teachers(self) -> dict[str, list[str]]:
        names = [a.name for a in self.agents]
        return {n: list(names) for n in names}  # any agent (itself included) may critique or score

    def rewards(self, batch: RewardInput) -> dict[str, AgentRewards]:
        if batch.generate is None or batch.prompts is None:
            raise RuntimeError("comas generates critiques and scores; the trainer passes RewardInput.generate")
        opts, k = self.options, batch.samples_per_prompt
        names = list(batch.rollouts)
        rng = random.Random(f"comas:{batch.step}:{batch.problem_ids[0] if batch.problem_ids else ''}")
        n_prompts = len(batch.problem_ids)
        slots = [(p, j, a) for p in range(n_prompts) for j in range(k) for a in names]  # one discussion per slot
        texts = {(p, j, a): batch.rollouts[a].completions[p][j].strip() for p, j, a in slots}  # round-1 solutions
        out = {a: AgentRewards(rewards=[[0.0] * k for _ in range(n_prompts)]) for a in names}
        counts = {"unparsable": 0, "score": 0.0, "n": 0}
        critiques: dict[Any, Any] = {}  # the previous round's critiques (round > 1 solvers see them as references)
        problem = {s: prompt_text(batch.prompts[s[2]][s[0]]).strip() for s in slots}  # as the solver was asked
        images = {s: tuple(getattr(batch.prompts[s[2]][s[0]], "images", ()) or ()) for s in slots}
        for rnd in range(opts.rounds):
            solver_requests, solutions = {}, {}
            if rnd > 0:  # new solutions; each sees references drawn from the previous round of its slot
                for p, j, a in slots:
                    picked = rng.sample([(texts[(p, j, b)], critiques[(p, j, b)].text) for b in names],
                                        min(opts.references, len(names)))
                    disc = "\n".join(f"Solution: {sol}\nEvaluation: {ev.strip()}" for sol, ev in picked)
                    solver_requests[(p, j, a)] = (a, with_images(SOLVER_TEMPLATE.format(
                        problem=problem[(p, j, a)], discussion=disc), images[(p, j, a)]))
                solutions = self._generate(batch, solver_requests, f"solver-r{rnd}")
                texts = {s: c.text.strip() for s, c in solutions.items()}
            eval_requests = {s: (ev, with_images(EVALUATOR_TEMPLATE.format(problem=problem[s], solution=texts[s]),
                                                 images[s]))
                             for s, ev in zip(slots, self._assign(rng, names, len(slots)))}
            critiques = self._generate(batch, eval_requests, f"evaluator-r{rnd}")
            score_requests = {s: (sc, with_images(SCORER_TEMPLATE.format(
                problem=problem[s], solution=texts[s], evaluation=critiques[s].text.strip()), images[s]))
                              for s, sc in zip(slots, self._assign(rng, names, len(slots)))}
            scores = self._generate(batch, score_requests, f"scorer-r{rnd}", opts.score_max_tokens)
            for s in slots:
                p, j, a = s
                score = parse_score(scores[s].text, opts.score_parser)
                r_sol, r_eval, r_score = role_rewards(score)
                counts["n"] += 1
                counts["unparsable"] += score is None
                counts["score"] += score or 0
                if rnd == 0:  # the round-1 solution is the agent's main rollout
                    out[a].rewards[p][j] = r_sol
                else:
                    out[a].extra.append(ExtraSample(solver_requests[s][1], solutions[s], r_sol, "solver"))
                ev, sc = eval_requests[s][0], score_requests[s][0]
                out[ev].extra.append(ExtraSample(eval_requests[s][1], critiques[s], r_eval, "evaluator"))
                out[sc].extra.append(ExtraSample(score_requests[s][1], scores[s], r_score, "scorer"))
        parsed = counts["n"] - counts["unparsable"]
        for a in names:
            out[a].metrics.update({"unparsable_score_fraction": counts["unparsable"] / max(1, counts["n"]),
                                   "mean_score": counts["score"] / parsed if parsed else 0.0,
                                   "extra_samples": float(len(out[a].extra))})
        return out

    @staticmethod
    def _assign(rng: random.Random, names: list[str], n_slots: int) -> list[str]:
        """A balanced, shuffled assignment of agents to slots (the reference's ``agent_order``)."""
        order = [names[i % len(names)] for i in range(n_slots)]
        rng.shuffle(order)
        return order

    @staticmethod
    def _generate(batch: RewardInput, requests: dict[Any, tuple[str, str | Request]], role: str,
                  max_new_tokens: int | None = None) -> dict[Any, Any]:
        """One completion per request (agent, prompt), batched per agent through the rollout engine."""
        by_agent: dict[str, list[Any]] = {}
        for key, (agent, _) in requests.items():
            by_agent.setdefault(agent, []).append(key)
        out = {}
        for agent, keys in by_agent.items():
            comps = batch.generate(agent, [requests[k][1] for k in keys], role, max_new_tokens)
            out.update(zip(keys, comps))
        return out

    def advantages(self, batch: RewardInput, rewards: dict[str, AgentRewards],
                   lengths: dict[str, list[int]]) -> dict[str, Any]:
        import torch  # method files stay torch-free at import time

        out = {}
        for name, r in rewards.items():
            flat = [x for row in r.rewards for x in row] + [e.reward for e in r.extra]
            out[name] = whitened_advantages(torch.tensor(flat), torch.tensor(lengths[name]))
        return out
