"""Co-RL: every agent is rewarded by agreement with its *peer's* plurality vote (no labels).

Follows the official release (``DrStranded/Co-RL`` ``llm/trainers/co_rl/co_rl_trainer.py::_calculate_rewards`` and
``co_label_utils.py``): each agent extracts an answer from each of its K rollouts and takes a plurality vote
(exact equality of normalised answers; ties go to the answer seen first; unparseable rollouts do not vote). Agent n
is rewarded 1/0 by whether its own extracted answer is equivalent to the vote of agent n-1 (indices cyclic: a
directed ring, so with two agents each learns from the other). A peer with no valid answer on a prompt labels
nothing: all K of my rollouts get 0 there (the release's unlabeled sentinel), so the prompt carries no gradient.
A rollout of mine with no answer gets 0. Advantages are group-normalised per agent by the shared core.

Deviation: equivalence is ``math-verify`` (the project's one verifier) instead of the release's prm800k/sympy
grader; on the micro profile's integer answers the two agree.
Option ``supervision: peer-majority`` (a control, not the paper) labels agent n with the strict majority of all
its peers' votes (ties unlabeled), the rule of the release's unused ``_peer_majority_vote`` helper; it is also
registered as its own method, ``corl-peer-majority`` (three or more agents), so it gets its own rows in tables.

Option ``supervision: collective`` is RLCCF's rule (arXiv 2508.12338, "Wisdom of the Crowd: RL from Coevolutionary
Collective Feedback"; no public code, so **unofficial**): every agent, itself included, casts its plurality vote
with the weight ``vote_weight`` gives it, ``self-consistency`` (default) = its vote's share of its own rollouts
(:attr:`Vote.ratio`, rollouts without an answer in the denominator); the label of every agent is the answer with
the largest total weight (ties: the earliest agent's answer in cohort order; no vote at all: unlabeled).
``vote_weight: uniform`` is the unweighted collective plurality. Registered as ``rlccf`` (two or more agents). From
``corl-peer-majority`` it is one option away: ``supervision: collective`` includes the agent's own vote and weights
the votes (the abstract's rule; the exact self-consistency score of the paper could not be read here).

Option ``supervision: dual-consensus`` is DCRL's label rule (arXiv 2603.16223, v0yager33/DualConsensus
``dcrl_utils.py::_harmonic_vote``) across two peers, "a label supported by both peers": agent n's label is the
answer with the best harmonic mean of its shares in agent n-1's rollouts (the anchor pool) and in its own (the
explorer pool), which must appear in both (:func:`harmonic_vote`); where none does, the peer's plurality vote, as
in the ring (DCRL falls back to the anchor's majority). Rewards stay Co-RL's 1/0 against the label (the release's
0.5 "anchor majority" reward belongs to its single-model method).

Option ``margin`` (SCRL's selective positive, arXiv 2603.19880, as a gate on any supervision): a vote labels
nothing unless its top answer's share of the voter's rollouts exceeds the second answer's by more than ``margin``
(:func:`vote_margin`; default ``null`` = off) — "no label when no answer has a clear majority".

``corl-frozen-peer`` (a control, not in the paper): every agent learns from the votes of its peer's *initial*
model, which never changes. Co-RL's claim has two parts that one comparison cannot separate: labels come from a
*different* model, and the peers *improve together*. Here each agent keeps a frozen copy of its starting weights (an
auxiliary model that is never updated) that samples its own K rollouts per prompt every step (its own seed stream,
through the same rollout engine); agent n is rewarded exactly as in Co-RL (the ring, math-verify equivalence, a peer
without a vote labels nothing) by agreement with the plurality vote of agent n-1's *frozen* rollouts. Both agents
train in one run, each on a fixed teacher of the other family; the policies' own rollouts label nothing, so Co-RL
minus this control is what co-evolution adds. Cost: K generations per prompt from each frozen copy (generation
doubles) and one extra model copy per agent; the frozen copy is not the KL anchor.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from corl_bench.method import (METHODS, AgentRewards, AgentRollouts, AuxiliaryModel, Method, RewardInput, Vote,
                               harmonic_vote, is_equivalent, plurality_vote)

SUPERVISION = ("ring", "peer-majority", "collective", "dual-consensus")
VOTE_WEIGHTS = ("self-consistency", "uniform")


@dataclass(frozen=True)
class CoRLOptions:
    supervision: str = "ring"
    """ring (paper: agent n learns from agent n-1) | peer-majority (strict majority of all peers' votes) |
    collective (RLCCF: every agent's vote, its own included, weighted by vote_weight; the heaviest answer) |
    dual-consensus (DCRL's harmonic vote of the ring peer's and the agent's own rollouts; else the peer's vote)"""
    threshold: float = 0.0
    """a peer vote whose share of valid answers is below this labels nothing (release default 0.0)"""
    margin: float | None = None
    """a vote whose top share (of all rollouts) exceeds the second's by no more than this labels nothing
    (SCRL's gate: 0.15); null = off"""
    vote_weight: str = "self-consistency"
    """collective only: self-consistency (a vote weighs its share of the voter's rollouts) | uniform"""

    def __post_init__(self) -> None:
        if self.supervision not in SUPERVISION:
            raise ValueError(f"supervision must be one of {', '.join(SUPERVISION)} (got {self.supervision!r})")
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1] (got {self.threshold})")
        if self.margin is not None and not 0.0 <= self.margin < 1.0:
            raise ValueError(f"margin must be in [0, 1) or null (got {self.margin})")
        if self.vote_weight not in VOTE_WEIGHTS:
            raise ValueError(f"vote_weight must be one of {', '.join(VOTE_WEIGHTS)} (got {self.vote_weight!r})")


@METHODS.register("corl", aliases=("co-rl",))
class CoRL(Method):
    """Co-RL: reward = agreement with the peer's plurality vote (directed ring)."""

    name = "corl"
    label = "Co-RL"
    cohort_labels = {"same-family": "same family", "cross-family": "cross-family",
                     "cross-family-rephrased": "cross-family+", "three-agent": "three agents"}
    table_order = 60
    min_agents = 2
    uses_labels = False
    extra_cost = "none (agents exchange answers only)"
    reference = "Co-RL, arXiv 2608.17253; DrStranded/Co-RL llm/trainers/co_rl/co_rl_trainer.py"
    Options = CoRLOptions

    def teachers(self) -> dict[str, list[str]]:
        names = [a.name for a in self.agents]
        if self.options.supervision in ("ring", "dual-consensus"):
            return {n: [names[i - 1]] for i, n in enumerate(names)}
        if self.options.supervision == "collective":
            return {n: list(names) for n in names}
        return {n: [m for m in names if m != n] for n in names}

    def _label(self, votes: list[Vote]) -> str | None:
        if self.options.supervision == "collective":
            weights: dict[str, float] = {}  # answer -> total weight, in the order the voters first name it
            for v in votes:
                if v.label is not None:
                    weights[v.label] = weights.get(v.label, 0.0) + (
                        v.ratio if self.options.vote_weight == "self-consistency" else 1.0)
            return max(weights, key=weights.__getitem__) if weights else None  # max keeps the first of ties
        if self.options.supervision in ("ring", "dual-consensus") or len(votes) == 1:
            return votes[0].label
        counts = Counter(v.label for v in votes if v.label is not None)
        if not counts:
            return None
        (top, c), *rest = counts.most_common()
        return top if c * 2 > len(votes) else None  # strict majority of all peers, ties unlabeled

    def votes(self, voters: dict[str, AgentRollouts]) -> dict[str, list[Vote]]:
        """agent -> [P] the vote of its rollouts in ``voters`` (label None: no vote passed the gates)."""
        return {name: [plurality_vote(ans, self.options.threshold, self.options.margin) for ans in ro.answers]
                for name, ro in voters.items()}

    def rewards(self, batch: RewardInput) -> dict[str, AgentRewards]:
        return self.rewards_from(batch, batch.rollouts)

    def rewards_from(self, batch: RewardInput, voters: dict[str, AgentRollouts]) -> dict[str, AgentRewards]:
        """Each agent's rollouts rewarded against the votes of its teachers' rollouts in ``voters`` (the ring, the
        peer majority, the collective vote, or the dual consensus of the ring peer's and its own rollouts)."""
        k, votes = batch.samples_per_prompt, self.votes(voters)
        dual = self.options.supervision == "dual-consensus"
        out = {}
        for name, peers in self.teachers().items():
            ro = batch.rollouts[name]
            labels = [self._label([votes[p][i] for p in peers]) for i in range(len(batch.problem_ids))]
            if dual:  # the answer both pools support, else the peer's vote (DCRL's anchor fallback)
                labels = [harmonic_vote(voters[peers[0]].answers[i], voters[name].answers[i]) or lb
                          for i, lb in enumerate(labels)]
            rewards = [[1.0 if (label is not None and a is not None and is_equivalent(a, label)) else 0.0
                        for a in ro.answers[i][:k]] for i, label in enumerate(labels)]
            unlabeled = sum(lb is None for lb in labels) / max(1, len(labels))
            out[name] = AgentRewards(rewards=rewards, pseudo_labels=labels, metrics={"unlabeled_fraction": unlabeled})
        return out


@dataclass(frozen=True)
class CoRLPeerMajorityOptions(CoRLOptions):
    supervision: str = "peer-majority"
    """peer-majority (this control's rule) | ring (then it is plain Co-RL)"""


@METHODS.register("corl-peer-majority")
class CoRLPeerMajority(CoRL):
    """Control: Co-RL where each agent learns from the strict majority of all its peers' votes (ties unlabeled)."""

    name = "corl-peer-majority"
    label = "Co-RL peer-majority"
    cohort_labels = {}
    table_order = 70
    min_agents = 3
    extra_cost = "none (agents exchange answers only)"
    reference = "control (not in the paper); DrStranded/Co-RL co_label_utils.py _peer_majority_vote (unused there)"
    Options = CoRLPeerMajorityOptions


@dataclass(frozen=True)
class RLCCFOptions(CoRLOptions):
    supervision: str = "collective"
    """collective (RLCCF's rule) | peer-majority | ring (then it is that Co-RL variant)"""


@METHODS.register("rlccf")
class RLCCF(CoRL):
    """RLCCF (unofficial): every agent rewarded by the collective vote, each model's vote weighted by its
    self-consistency."""

    name = "rlccf"
    label = "RLCCF"
    official = False
    cohort_labels = {}
    table_order = 76  # not in the Co-RL paper's table: after its rows (beside the Co-RL controls)
    min_agents = 2
    extra_cost = "none (agents exchange answers only)"
    reference = ("RLCCF, arXiv 2508.12338 (no public code; from the abstract: collective vote weighted by each "
                 "model's self-consistency)")
    Options = RLCCFOptions


FROZEN = "frozen-peer"


@METHODS.register("corl-frozen-peer", aliases=("frozen-peer",))
class CoRLFrozenPeer(CoRL):
    """Control: Co-RL whose labels come from the peers' frozen initial models (no co-evolution)."""

    name = "corl-frozen-peer"
    label = "Co-RL frozen peer"
    kind = "control"
    cohort_labels = {"same-family": "same family", "cross-family": "cross-family"}
    table_order = 75
    auxiliary = (AuxiliaryModel(FROZEN, generates=True, kl_reference=False, seed_salt=2_000),)
    extra_cost = "K generations per prompt from each agent's frozen initial copy (2x generation); one model copy each"
    reference = "control (not in the paper): Co-RL (DrStranded/Co-RL co_rl_trainer.py) with the peers' votes frozen"

    def auxiliary_update(self, name: str, step: int, total_steps: int) -> float:
        return 0.0  # never moves: the trainer skips the update, the copy stays bit-identical to the start

    def rewards(self, batch: RewardInput) -> dict[str, AgentRewards]:
        frozen = (batch.auxiliary_rollouts or {}).get(FROZEN)
        if frozen is None:
            raise RuntimeError("corl-frozen-peer needs its frozen copies' rollouts; the trainer generates them for "
                               "auxiliary models that generate")
        return self.rewards_from(batch, frozen)
