"""Multi-turn debate among a method's agents: the shared machinery of ``maporl`` and ``maca``.

A debate runs on the step's problems in K discussion slots per problem (one per sampled rollout, as CoMAS's
discussions): in round 0 every agent's answer in slot j is its j-th main rollout; in round t > 0 every agent answers
again, shown the previous round's responses of the same slot. Every turn goes through the answering agent's own
rollout engine (``RewardInput.generate``, role ``debate-r<t>``, the run's sampling settings and token cap), and every
turn's answer is extracted by the run's extractor (``RewardInput.extract``), as the main rollouts' are.

The round-t prompt (t > 0) for agent a, slot j of problem p, is the problem's own request as a was asked it in round 0,
preceded by the previous round's responses and one instruction (``DEBATE_TEMPLATE``)::

    Agent 1: <response>
    Agent 2: <response>
    Update your answer.
    <the agent's round-0 prompt of the problem, unchanged>

The responses are those of the *other* agents (``include_own`` adds the agent's own previous one, as MARTI's
``contain_self``), in a seeded random order (MARTI's and MACA's shuffle; "Agent i" numbers the shown responses, not
the cohort), at most ``max_others`` of them (0 = all); ``show: answer`` shows each response's extracted answer as
``\\boxed{...}`` (or ``(no answer)``) instead of its full text. The problem comes last and unchanged, so the prompt
ends exactly as the round-0 prompt did (MARTI's template, "Here are solutions from other agents: Agent i: ... give an
updated answer to the following question: ...", also puts the question last); a request with images keeps them
(``Request(text, images)``), so every turn sees what round 0 saw. The template is a terse paraphrase of the
references' (MARTI, MACA, MAPoRL) without a chat template: the micro models have none, a 128-position window and
near-character tokenizers (one full response costs about 30 tokens, the instruction 14, a problem about 27).

Nothing here imports torch at import time; :mod:`corl_bench.method` re-exports the public names.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from corl_bench.grading.verifier import extract_normalized, plurality_vote
from corl_bench.rollout.request import Request, prompt_text

__all__ = ["DEBATE_TEMPLATE", "Debate", "DebateOptions", "Turn", "debate_prompt", "run_debate", "turn_advantages"]

DEBATE_TEMPLATE = "{responses}\nUpdate your answer.\n{problem}"
SHOW = ("completion", "answer")
ESTIMATORS = ("group", "reinforce")


@dataclass(frozen=True)
class DebateOptions:
    """Options every debate method shares (a method's Options dataclass subclasses this one)."""

    rounds: int = 2
    """debate rounds per step, round 0 included (round 0 = the main rollouts); 1 = no debate"""
    max_others: int = 0
    """responses shown per turn (0 = all)"""
    include_own: bool = False
    """show the agent its own previous response too (MARTI contain_self)"""
    show: str = "completion"
    """completion (each response's full text) | answer (only its extracted answer, as \\boxed{...})"""

    def __post_init__(self) -> None:
        if self.rounds < 1:
            raise ValueError(f"rounds must be >= 1 (got {self.rounds}); set method.options.rounds=2 for one "
                             "debate round after the first answers")
        if self.max_others < 0:
            raise ValueError(f"max_others must be >= 0 (got {self.max_others}); 0 shows every other agent")
        if self.show not in SHOW:
            raise ValueError(f"show must be one of {', '.join(SHOW)} (got {self.show!r})")


@dataclass(frozen=True)
class Turn:
    """One agent's answer in one round of one discussion slot."""

    text: str
    answer: str | None  # extracted and normalised (None = no answer)
    prompt: Any = None  # str | Request the turn answered; None in round 0 (the main rollout's request)
    completion: Any = None  # the generated Completion; None in round 0 (the main rollout trains as usual)


@dataclass(frozen=True)
class Debate:
    """Every turn of a step's debates: ``turns[agent][t][p][j]`` (T rounds, P problems, K slots)."""

    agents: tuple[str, ...]
    turns: dict[str, list[list[list[Turn]]]]

    @property
    def rounds(self) -> int:
        return len(self.turns[self.agents[0]])

    def answers(self, p: int, j: int) -> list[list[str | None]]:
        """[T][A] the answers of discussion slot j of problem p, by round then agent (cohort order)."""
        return [[self.turns[a][t][p][j].answer for a in self.agents] for t in range(self.rounds)]

    def vote(self, p: int, rounds: Sequence[int] | None = None) -> str | None:
        """Plurality answer of problem p over every slot, agent and round in ``rounds`` (default: all), counted in
        the order slot, agent, round (ties go to the first seen, as ``Counter.most_common``); None if no answer."""
        ts = range(self.rounds) if rounds is None else rounds
        k = len(self.turns[self.agents[0]][0][p])
        return plurality_vote([self.turns[a][t][p][j].answer for j in range(k) for a in self.agents
                               for t in ts]).label


def debate_prompt(request: Any, responses: Sequence[str]) -> str | Request:
    """Round t > 0 prompt: ``responses`` (already chosen and ordered) before the agent's round-0 ``request``; the
    request's images travel with it."""
    listed = "\n".join(f"Agent {i + 1}: {r}" for i, r in enumerate(responses))
    text = DEBATE_TEMPLATE.format(responses=listed, problem=prompt_text(request))
    images = tuple(getattr(request, "images", ()) or ())
    return Request(text=text, images=images) if images else text


def _shown(turn: Turn, show: str) -> str:
    if show == "answer":
        return f"\\boxed{{{turn.answer}}}" if turn.answer is not None else "(no answer)"
    return turn.text.strip()


def run_debate(batch: Any, options: DebateOptions, tag: str) -> Debate:
    """Run ``options.rounds`` rounds on ``batch`` (a :class:`corl_bench.method.RewardInput`); round 0 is its main
    rollouts (the first K of every prompt). ``tag`` (the method's name) salts the seeded response order."""
    if options.rounds > 1 and (batch.generate is None or batch.prompts is None):
        raise RuntimeError(f"{tag} debates through the agents' engines; the trainer passes RewardInput.generate "
                           "and RewardInput.prompts")
    extract: Callable[[str], Any] = getattr(batch, "extract", None) or extract_normalized
    agents = tuple(batch.rollouts)
    k, n_prob = batch.samples_per_prompt, len(batch.problem_ids)
    turns: dict[str, list[list[list[Turn]]]] = {
        a: [[[Turn(text=batch.rollouts[a].completions[p][j], answer=batch.rollouts[a].answers[p][j])
              for j in range(k)] for p in range(n_prob)]] for a in agents}
    for t in range(1, options.rounds):
        asked: dict[str, list[tuple[int, int, Any]]] = {a: [] for a in agents}
        for p in range(n_prob):
            for j in range(k):
                for a in agents:
                    pool = [b for b in agents if options.include_own or b != a]
                    random.Random(f"{tag}:{batch.step}:{batch.problem_ids[p]}:{j}:{a}:{t}").shuffle(pool)
                    if options.max_others:
                        pool = pool[:options.max_others]
                    shown = [_shown(turns[b][t - 1][p][j], options.show) for b in pool]
                    asked[a].append((p, j, debate_prompt(batch.prompts[a][p], shown)))
        for a in agents:
            comps = batch.generate(a, [q for _, _, q in asked[a]], f"debate-r{t}")
            row: list[list[Turn]] = [[None] * k for _ in range(n_prob)]  # type: ignore[list-item]
            for (p, j, q), c in zip(asked[a], comps):
                row[p][j] = Turn(text=c.text, answer=extract(c.text), prompt=q, completion=c)
            turns[a].append(row)
    return Debate(agents=agents, turns=turns)


def turn_advantages(main: Sequence[Sequence[float]], extra: Sequence[float], lengths: Sequence[int],
                    estimator: str) -> Any:
    """One agent's advantages for its turns, in training order: ``main[p][j]`` the rewards of round 0 (its main
    rollouts, row-major), then ``extra`` the rewards of rounds 1.. in (round, problem, slot) order (its extra
    samples, as :func:`run_debate` orders them).

    ``group``: GRPO group advantages (std-scaled, eps 1e-6) over the K turns of one (round, problem) — round 0's
    group is the usual one (one prompt, K samples); a later round's K turns answer K different debate prompts of
    the same problem. ``reinforce``: REINFORCE++ rewards whitened over all the agent's turns, token-weighted."""
    import torch

    from corl_bench.advantages import group_advantages, whitened_advantages

    r0 = torch.tensor([list(row) for row in main], dtype=torch.float32)  # (P, K)
    r = torch.cat([r0.reshape(-1), torch.tensor(list(extra), dtype=torch.float32)])
    if r.numel() % max(1, r0.numel()):
        raise ValueError(f"{len(extra)} extra rewards are not whole rounds of {r0.numel()} turns")
    if estimator == "group":
        return group_advantages(r.reshape(-1, r0.shape[-1])).reshape(-1)
    if estimator == "reinforce":
        return whitened_advantages(r, torch.tensor(list(lengths)))
    raise ValueError(f"estimator must be one of {', '.join(ESTIMATORS)} (got {estimator!r})")
