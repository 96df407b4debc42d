"""MACA, Multi-Agent Consensus Alignment (Samanta et al., arXiv 2509.15172): agents debate, and every answer is
rewarded for agreeing with the debate's majority — the same-model counterpart of Co-RL.

Follows ``facebookresearch/maca`` (``debate.py``: the debate and its ``majority_vote`` over the final round's
answers; ``data.py::prepare_post_train_data``; ``model.py::consensus_reward_func``; ``args.py`` defaults: 3 clones
of one model, 2 rounds, up to 5 other agents shown, MV-GRPO with ``use_majority_vote``). Round 0 answers alone,
round t > 0 sees the other agents' previous responses (the debate of :mod:`corl_bench.debate`; its module docstring
states the round-t prompt format). The consensus of problem p is the plurality answer over the *final round's*
answers of all agents (MACA: ``majority_vote`` over the parsed last-round answers; no-answer turns do not vote);
every turn of every agent gets the step reward of ``consensus_reward_func``::

    reward = 1 + (+1 if the turn's answer is equivalent to the consensus else -1)      (i.e. 2 or 0)

A problem without any final-round answer has no consensus (MACA skips it): its turns all get 0 and carry no
gradient. The cohort's agents are the debaters; MACA's setting is clones (``maca:same-family``), but nothing stops
a mixed cohort. Advantages (``estimator``): ``group`` (default) — GRPO group advantages (std-scaled) over the K
turns of one (round, problem), TRL's GRPO as MACA uses it; ``reinforce`` — REINFORCE++ whitened over the agent's
turns.

Deviations: MACA debates once per question offline, then samples G fresh completions of the debate-context prompt
for GRPO; here the debate runs every step in K slots per problem, the consensus pools the final rounds of the K
slots, and the debate turns themselves are the samples trained on (round 0 = the main rollouts, on the plain
problem prompt — MACA's ``no_context`` form; later rounds on the debate prompt — its ``include_debate_context``
form). MACA's ties go to the largest answer string (``sorted``); here to the first seen. ``format_reward`` (MACA's
default ``use_format_reward``: bullet-point reasoning lines and one ``\\boxed{}`` on the last line, 0..1, added
to the consensus reward) is off by default: it rewards the line layout MACA's prompt asks for, which the harness's
prompts do not ask for. ``rounds`` defaults to 2 (MACA's default).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from corl_bench.method import (METHODS, AgentRewards, DebateOptions, ExtraSample, Method, RewardInput,
                               is_equivalent, run_debate, turn_advantages)


def consensus_reward(answer: str | None, consensus: str | None) -> float:
    """``consensus_reward_func``: 1 + (+1 if ``answer`` matches ``consensus``, else -1); 0 without a consensus."""
    if consensus is None:
        return 0.0
    return 2.0 if (answer is not None and is_equivalent(answer, consensus)) else 0.0


def format_reward(text: str) -> float:
    """``format_reward_func``: thought-step lines (> 10 characters, no box) and one box on the last line, in [0, 1]."""
    lines = [line.strip() for line in text.split("\n") if line.strip()]
    steps = sum(1 for line in lines if "\\boxed{" not in line and len(line) > 10)
    score = 0.2 + min(0.2, (steps - 2) * 0.04) if steps >= 2 else 0.0
    if text.count("\\boxed{") == 1:
        score += 0.3 + (0.2 if "\\boxed{" in lines[-1] else -0.1)
    else:
        score -= 0.2
    return max(0.0, min(1.0, score))


@dataclass(frozen=True)
class MACAOptions(DebateOptions):
    max_others: int = 5
    """other agents' responses shown per turn (MACA: up to 5; 0 = all)"""
    format_reward: bool = False
    """add MACA's format reward (its default; off here, see the module docstring)"""
    estimator: str = "group"
    """group (GRPO over the K turns of a round, as MACA's TRL GRPO) | reinforce (REINFORCE++ whitened)"""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.estimator not in ("reinforce", "group"):
            raise ValueError(f"estimator must be group or reinforce (got {self.estimator!r})")


@METHODS.register("maca")
class MACA(Method):
    """MACA: a debate of (cloned) agents; every turn rewarded by agreement with the final round's majority."""

    name = "maca"
    label = "MACA"
    table_order = 86
    min_agents = 2
    uses_labels = False
    extra_cost = "(rounds - 1) generations per rollout (the debate turns), each trained on"
    reference = ("MACA, arXiv 2509.15172; facebookresearch/maca model.py::consensus_reward_func, "
                 "debate.py::majority_vote")
    Options = MACAOptions

    def teachers(self) -> dict[str, list[str]]:
        names = [a.name for a in self.agents]
        return {n: list(names) for n in names}  # the consensus is every agent's final answer

    def rewards(self, batch: RewardInput) -> dict[str, AgentRewards]:
        opts, k = self.options, batch.samples_per_prompt
        debate = run_debate(batch, opts, self.name)
        n_prob, last = len(batch.problem_ids), debate.rounds - 1
        consensus = [debate.vote(p, rounds=[last]) for p in range(n_prob)]
        out = {}
        for a in debate.agents:
            turns = debate.turns[a]
            r = [[[consensus_reward(turns[t][p][j].answer, consensus[p])
                   + (format_reward(turns[t][p][j].text) if opts.format_reward else 0.0) for j in range(k)]
                  for p in range(n_prob)] for t in range(debate.rounds)]
            extra = [ExtraSample(turns[t][p][j].prompt, turns[t][p][j].completion, r[t][p][j], f"debate-r{t}")
                     for t in range(1, debate.rounds) for p in range(n_prob) for j in range(k)]
            agree = [consensus_reward(x.answer, consensus[p]) / 2 for rnd in turns for p, row in enumerate(rnd)
                     for x in row]
            out[a] = AgentRewards(rewards=r[0], pseudo_labels=consensus, extra=extra,
                                  metrics={"extra_samples": float(len(extra)),
                                           "consensus_agreement": sum(agree) / max(1, len(agree)),
                                           "unlabeled_fraction": sum(c is None for c in consensus) / max(1, n_prob)})
        return out

    def advantages(self, batch: RewardInput, rewards: dict[str, AgentRewards],
                   lengths: dict[str, list[int]]) -> dict[str, Any]:
        return {a: turn_advantages(r.rewards, [e.reward for e in r.extra], lengths[a], self.options.estimator)
                for a, r in rewards.items()}
