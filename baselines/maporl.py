"""MAPoRL (Park et al., ACL 2025, arXiv 2502.18439): agents debate over T rounds and train on every turn.

Official code: ``chanwoo-park-official/MAPoRL`` (``trl/trl/trainer/utils_multi_unified.py``: ``score_rule``,
``bonus_rule``; ``trl/trl/trainer/ppov2_trainer_multi_different_model.py``; methods.md section 9). Turn 0 answers
alone, every later turn sees the other agents' previous responses (the debate of :mod:`corl_bench.debate`; its
module docstring states the round-t prompt format). The official turn score ``v^i_t`` is a verifier trained on
ground-truth-labelled data; the label-free form is the one CoMAS used as a baseline, MARTI's debate
(``TsinghuaC3I/MARTI`` ``marti/verifiers/auto_reward_alloc.py``, the CoMAS fork ``wt-2048/comas``
``marti/cli/configs/maporl.yaml``: 4 agents, 2 rounds).

``maporl`` (label-free): ``v^i_t = 1`` when turn t's answer of agent i agrees (math-verify equivalence) with the
plurality answer over *all* agents' answers of *all* turns of *all* K discussion slots of the problem (MARTI's
``use_ttrl`` majority: slot, agent, turn order, ties to the first seen, no-answer turns do not vote), else 0.
**Deviation** from the official reward, which needs labels: the verifier is replaced by this majority. (In the
CoMAS fork and MARTI, ``MultiAgentRewardAllocation(**reward_alloc)`` reads the switch as ``kwargs.get("ttrl")``
while the config key is ``use_ttrl``, so the shipped configs in fact reward agreement with the ground truth:
that form is ``maporl-gt --set method.options.horizon=current``.)

``maporl-gt`` (uses labels; shown beside GT-Reward, never ranked): ``v^i_t`` = 1 when the answer is equivalent to
the ground truth, the official ``noverifier`` config (``config_ppo2_multi_agent2_turn2_gsm8k_noverifier.py``),
with its reward rule as defaults: ``horizon: discounted_sum``, ``discount: 0.3``.

Options on top of the turn score (both methods):

* ``horizon: discounted_sum`` — the official influence-aware reward (``rule_horizon=discounted_sum``,
  ``rule_agent_share=all``)::

      R^i_t = (v^i_t + sum_{t'>t} gamma^(t'-t) * mean_j v^j_t') / sum_{t'>=t} gamma^(t'-t)

  ``horizon: current`` (``maporl``'s default, MARTI) is ``R^i_t = v^i_t``.
* ``alpha: [a0, a1, a2, a3]`` — the official incentive bonus (``bonus_rule``, threshold 0.5 on the turn score,
  signs exactly as coded): own revision at t > 0 — wrong->right ``+a1`` if the others were wrong before, ``+a0`` if
  they were right; right->wrong ``-a1`` if the others were right, ``-a0`` if wrong; influence at t < T-1 — if the
  others (mean score) flip wrong->right at t+1: ``-a3`` if I was right, ``-a2`` if I was wrong; right->wrong:
  ``+a3`` if I was wrong, ``+a2`` if I was right. Default all 0 (no bonus).
* ``shaping`` — MARTI's reward allocation (``quality``: ``R + s_alpha[QR - (1-Q)(1-R)]``, ``margin``:
  ``R + s_alpha(R - Q)`` for t >= 1, with Q the mean score of every agent's earlier turns; ``*_with_outcome``
  adds ``s_beta`` times the agent's last-turn score to every turn); ``none`` (default, MARTI's ``name: null``).
  Not combined with ``horizon: discounted_sum`` (two different credit rules).

Every turn is a training sample of the agent that wrote it: round 0 = its main rollouts, later rounds = extra
samples. Advantages (``estimator``): ``reinforce`` (default) — REINFORCE++ whitened over all the agent's turns,
as the fork's only training script (``scripts/train_comas.sh``, ``advantage_estimator="reinforce"``; no MAPoRL
script is shipped) trains CoMAS; ``group`` — GRPO groups of the K turns of one (round, problem), MARTI's own
debate example (``examples/multi-agent/run_train_mad.sh``, ``group_norm``).
Deviations forced by the harness: PPO with a value head (official) is replaced by these critic-free estimators;
agents = the cohort's agents (CoMAS's baseline: 4 copies of one model), K debates per problem; the debate always
runs all rounds (the official trainer can drop a question from later turns, ``finished_question``); a turn without
an answer scores 0 (official: the penalty ``-10`` for an unboxed output); the verifier is the project's math-verify.
``rounds`` defaults to 2 (the CoMAS fork and the official noverifier config; official GSM8K runs also use 3).
Each turn sees every other agent's previous response (official: the others' responses, the agent's own in its chat
history); the CoMAS fork's ``contain_self: true, max_others: 2`` is ``--set method.options.include_own=true --set
method.options.max_others=2`` — with two full responses the prompt (about 110 tokens) does not leave the micro
models' 128 positions room for an answer, so it is not the default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from corl_bench.method import (METHODS, AgentRewards, Debate, DebateOptions, ExtraSample, Method, RewardInput,
                               is_equivalent, run_debate, turn_advantages)

SHAPINGS = ("none", "quality", "margin", "quality_with_outcome", "margin_with_outcome")
THRESHOLD = 0.5  # bonus_rule's correct_threshold = wrong_threshold


def agreement(answers: list[list[str | None]], label: str | None) -> list[list[float]]:
    """[T][A] turn scores: 1.0 where the answer is equivalent to ``label`` (0 without a label or an answer)."""
    return [[1.0 if (a is not None and label is not None and is_equivalent(a, label)) else 0.0 for a in row]
            for row in answers]


def discounted_sum(v: list[list[float]], t: int, i: int, gamma: float) -> float:
    """``score_rule(rule_horizon="discounted_sum", rule_agent_share="all")`` for agent i's turn t of scores v[T][A]."""
    n_turns, n_agents = len(v), len(v[0])
    future = sum(gamma ** (s - t) * sum(v[s]) / n_agents for s in range(t + 1, n_turns))
    return (v[t][i] + future) / sum(gamma ** (s - t) for s in range(t, n_turns))


def _others(row: list[float], i: int) -> float:
    return sum(x for a, x in enumerate(row) if a != i) / (len(row) - 1)


def incentive(c: list[list[float]], t: int, i: int, alpha: tuple[float, ...]) -> float:
    """``bonus_rule``: agent i's revision and influence bonus at turn t of correctness c[T][A] (signs as coded)."""
    n_turns, n_agents = len(c), len(c[0])
    bonus, cur = 0.0, c[t][i]
    if t > 0:
        prev = c[t - 1][i]
        others = _others(c[t - 1], i) if n_agents > 1 else None
        if prev > THRESHOLD and cur < THRESHOLD:  # right -> wrong
            if others is None or others > THRESHOLD:
                bonus -= alpha[1]  # (the single-agent branch also takes a1)
            elif others < THRESHOLD:
                bonus -= alpha[0]
        if prev < THRESHOLD and cur > THRESHOLD:  # wrong -> right
            if others is None or others < THRESHOLD:
                bonus += alpha[1]
            elif others > THRESHOLD:
                bonus += alpha[0]
    if t < n_turns - 1 and n_agents > 1:
        nxt, now = _others(c[t + 1], i), _others(c[t], i)
        if nxt > THRESHOLD and now < THRESHOLD:  # the others turn right next
            if cur > THRESHOLD:
                bonus -= alpha[3]
            elif cur < THRESHOLD:
                bonus -= alpha[2]
        if nxt < THRESHOLD and now > THRESHOLD:  # the others turn wrong next
            if cur < THRESHOLD:
                bonus += alpha[3]
            elif cur > THRESHOLD:
                bonus += alpha[2]
    return bonus


def shaped(v: list[list[float]], name: str, s_alpha: float, s_beta: float) -> list[list[float]]:
    """MARTI ``MultiAgentRewardAllocation._reward_shaping`` of one debate's scores v[T][A] (debate form: Q is the
    mean over every agent's turns before t)."""
    out = [list(row) for row in v]
    if name == "none":
        return out
    n_turns, n_agents = len(v), len(v[0])
    for m in range(n_agents):
        for t in range(1, n_turns):
            q = sum(v[s][a] for s in range(t) for a in range(n_agents)) / (t * n_agents)
            r = v[t][m]
            out[t][m] = r + s_alpha * (q * r - (1 - q) * (1 - r)) if "quality" in name else r + s_alpha * (r - q)
    if name.endswith("_with_outcome"):
        for m in range(n_agents):
            for t in range(n_turns):
                out[t][m] += s_beta * v[-1][m]
    return out


@dataclass(frozen=True)
class MAPoRLOptions(DebateOptions):
    horizon: str = "current"
    """current (R = v, MARTI) | discounted_sum (official influence-aware reward)"""
    discount: float = 0.3
    """gamma of horizon=discounted_sum (official rule_discount 0.3)"""
    alpha: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0)
    """incentive bonus weights [a0, a1, a2, a3] (official bonus_rule; all 0 = none)"""
    shaping: str = "none"
    """none | quality | margin | quality_with_outcome | margin_with_outcome (MARTI reward allocation)"""
    shaping_alpha: float = 0.5
    """weight of the quality or margin term of a shaping (MARTI's alpha)"""
    shaping_beta: float = 0.5
    """weight of the final turn's score that the *_with_outcome shapings add to every turn (MARTI's beta)"""
    estimator: str = "reinforce"
    """reinforce (REINFORCE++ whitened over the agent's turns) | group (GRPO over the K turns of a round)"""

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "alpha", tuple(float(a) for a in self.alpha))
        if len(self.alpha) != 4 or min(self.alpha) < 0:
            raise ValueError(f"alpha must be four non-negative weights [a0, a1, a2, a3] (got {list(self.alpha)}); "
                             "e.g. method.options.alpha=[0,0.5,0,0]")
        if self.horizon not in ("current", "discounted_sum"):
            raise ValueError(f"horizon must be current or discounted_sum (got {self.horizon!r})")
        if not 0.0 <= self.discount <= 1.0:
            raise ValueError(f"discount must be in [0, 1] (got {self.discount})")
        if self.shaping not in SHAPINGS:
            raise ValueError(f"shaping must be one of {', '.join(SHAPINGS)} (got {self.shaping!r})")
        if self.shaping != "none" and self.horizon != "current":
            raise ValueError(f"shaping={self.shaping} and horizon=discounted_sum are two credit rules; set "
                             "method.options.horizon=current or method.options.shaping=none")
        if self.estimator not in ("reinforce", "group"):
            raise ValueError(f"estimator must be reinforce or group (got {self.estimator!r})")


@METHODS.register("maporl")
class MAPoRL(Method):
    """MAPoRL, label-free (CoMAS's baseline form): a debate; each turn rewarded by the majority over all turns."""

    name = "maporl"
    label = "MAPoRL"
    table_order = 82
    min_agents = 2
    uses_labels = False
    extra_cost = "(rounds - 1) generations per rollout (the debate turns), each trained on"
    reference = ("MAPoRL, arXiv 2502.18439; chanwoo-park-official/MAPoRL trl/trl/trainer/utils_multi_unified.py; "
                 "label-free form: TsinghuaC3I/MARTI marti/verifiers/auto_reward_alloc.py")
    Options = MAPoRLOptions

    def teachers(self) -> dict[str, list[str]]:
        names = [a.name for a in self.agents]
        return {n: list(names) for n in names}  # the majority runs over every agent's turns

    def labels(self, batch: RewardInput, debate: Debate) -> list[str | None]:
        """[P] what each turn is scored against: the majority over all agents' answers across turns."""
        return [debate.vote(p) for p in range(len(batch.problem_ids))]

    def rewards(self, batch: RewardInput) -> dict[str, AgentRewards]:
        opts, k = self.options, batch.samples_per_prompt
        debate = run_debate(batch, opts, self.name)
        labels = self.labels(batch, debate)
        names, n_turns, n_prob = list(debate.agents), debate.rounds, len(batch.problem_ids)
        per_turn = {a: [[[0.0] * k for _ in range(n_prob)] for _ in range(n_turns)] for a in names}  # [T][P][K]
        for p in range(n_prob):
            for j in range(k):
                v = agreement(debate.answers(p, j), labels[p])
                base = shaped(v, opts.shaping, opts.shaping_alpha, opts.shaping_beta)
                for t in range(n_turns):
                    for i, a in enumerate(names):
                        r = discounted_sum(v, t, i, opts.discount) if opts.horizon == "discounted_sum" else base[t][i]
                        per_turn[a][t][p][j] = r + (incentive(v, t, i, opts.alpha) if any(opts.alpha) else 0.0)
        return {a: self._agent_rewards(debate, a, per_turn[a], labels) for a in names}

    def _agent_rewards(self, debate: Debate, agent: str, r: list[list[list[float]]],
                       labels: list[str | None]) -> AgentRewards:
        turns = debate.turns[agent]
        extra = [ExtraSample(turns[t][p][j].prompt, turns[t][p][j].completion, r[t][p][j], f"debate-r{t}")
                 for t in range(1, len(turns)) for p in range(len(turns[t])) for j in range(len(turns[t][p]))]
        last = turns[-1]
        agree = [1.0 if (x.answer is not None and lb is not None and is_equivalent(x.answer, lb)) else 0.0
                 for row, lb in zip(last, labels) for x in row]
        changed = [turns[t][p][j].answer != turns[t - 1][p][j].answer for t in range(1, len(turns))
                   for p in range(len(turns[t])) for j in range(len(turns[t][p]))]
        metrics = {"extra_samples": float(len(extra)), "last_round_agreement": sum(agree) / max(1, len(agree)),
                   "answer_change_rate": sum(changed) / len(changed) if changed else 0.0}
        return AgentRewards(rewards=r[0], pseudo_labels=labels, metrics=metrics, extra=extra)

    def advantages(self, batch: RewardInput, rewards: dict[str, AgentRewards],
                   lengths: dict[str, list[int]]) -> dict[str, Any]:
        return {a: turn_advantages(r.rewards, [e.reward for e in r.extra], lengths[a], self.options.estimator)
                for a, r in rewards.items()}


@dataclass(frozen=True)
class MAPoRLGTOptions(MAPoRLOptions):
    horizon: str = "discounted_sum"
    """discounted_sum (official) | current"""


@METHODS.register("maporl-gt")
class MAPoRLGT(MAPoRL):
    """MAPoRL, supervised (the official noverifier form): a debate; each turn scored by ground-truth correctness."""

    name = "maporl-gt"
    label = "MAPoRL-GT"
    table_order = 84
    uses_labels = True
    reference = ("MAPoRL, arXiv 2502.18439; chanwoo-park-official/MAPoRL "
                 "config/ppo_config/config_ppo2_multi_agent2_turn2_gsm8k_noverifier.py, utils_multi_unified.py")
    Options = MAPoRLGTOptions

    def labels(self, batch: RewardInput, debate: Debate) -> list[str | None]:
        if batch.labels is None:
            raise RuntimeError("maporl-gt needs labels; the trainer passes them to methods with uses_labels = True")
        return list(batch.labels)
