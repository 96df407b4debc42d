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

from corl_bench.method import (METHODS, AgentRewards, AgentRollouts, AuxiliaryModel, Method, RewardInput,
                               is_equivalent, plurality_vote)


@dataclass(frozen=True)
class CoRLOptions:
    supervision: str = "ring"
    """ring (paper: agent n learns from agent n-1) | peer-majority (strict majority of all peers' votes)"""
    threshold: float = 0.0
    """a peer vote whose share of valid answers is below this labels nothing (release default 0.0)"""

    def __post_init__(self) -> None:
        if self.supervision not in ("ring", "peer-majority"):
            raise ValueError(f"supervision must be ring or peer-majority (got {self.supervision!r})")
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1] (got {self.threshold})")


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
        if self.options.supervision == "ring":
            return {n: [names[i - 1]] for i, n in enumerate(names)}
        return {n: [m for m in names if m != n] for n in names}

    def _label(self, votes: list[str | None]) -> str | None:
        if self.options.supervision == "ring" or len(votes) == 1:
            return votes[0]
        counts = Counter(v for v in votes if v is not None)
        if not counts:
            return None
        (top, c), *rest = counts.most_common()
        return top if c * 2 > len(votes) else None  # strict majority of all peers, ties unlabeled

    def votes(self, voters: dict[str, AgentRollouts]) -> dict[str, list[str | None]]:
        """agent -> [P] the plurality vote of its rollouts in ``voters`` (None: no vote above the threshold)."""
        return {name: [plurality_vote(ans, self.options.threshold).label for ans in ro.answers]
                for name, ro in voters.items()}

    def rewards(self, batch: RewardInput) -> dict[str, AgentRewards]:
        return self.rewards_from(batch, self.votes(batch.rollouts))

    def rewards_from(self, batch: RewardInput, votes: dict[str, list[str | None]]) -> dict[str, AgentRewards]:
        """Each agent's rollouts rewarded against its teachers' ``votes`` (the ring or the peer majority)."""
        k = batch.samples_per_prompt
        out = {}
        for name, peers in self.teachers().items():
            ro = batch.rollouts[name]
            labels = [self._label([votes[p][i] for p in peers]) for i in range(len(batch.problem_ids))]
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
        return self.rewards_from(batch, self.votes(frozen))
