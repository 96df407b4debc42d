"""TTRL (Zuo et al., arXiv 2504.16084): reward = agreement with the agent's *own* plurality vote.

Follows ``PRIME-RL/TTRL`` (``verl/verl/workers/reward_manager/ttrl.py``, ``ttt_metrics.py``): the label is the
plurality answer over ``votes_per_prompt`` samples (``Counter.most_common``: ties go to the answer seen first),
every rollout is rewarded 1/0 by equivalence with it, and only the first ``samples_per_prompt`` rollouts of each
prompt are trained on (the original TTRL votes on 64 and trains on 32). ``votes_per_prompt: 0`` (default) votes on
the trained samples only, as the Co-RL release's TTRL baseline does. A prompt whose samples have no valid answer is
unlabeled (reward 0), as Co-rewarding does (methods.md section 3, "Empty answers").

Option ``margin`` (not TTRL's: SCRL's selective-positive gate, arXiv 2603.19880, Jasper-Yan/SCRL
``scrl_utils.py::determine_pseudo_labels``): a prompt is unlabeled unless its top answer's share of the voting
samples exceeds the second answer's by more than ``margin`` (:func:`vote_margin`; SCRL uses 0.15) — "no label
when no answer has a clear majority". Default ``null``: off, plain TTRL.
"""

from __future__ import annotations

from dataclasses import dataclass

from corl_bench.method import (METHODS, AgentRewards, ConfigError, Method, RewardInput, is_equivalent,
                               plurality_vote)


@dataclass(frozen=True)
class TTRLOptions:
    votes_per_prompt: int = 0
    """samples per prompt that vote (>= rollout.samples_per_prompt); 0 = vote on the trained samples"""

    margin: float | None = None
    """no label unless the top answer's share of the votes exceeds the second's by more than this (SCRL: 0.15);
    null = off"""

    def __post_init__(self) -> None:
        if self.votes_per_prompt < 0:
            raise ValueError(f"votes_per_prompt must be >= 0 (got {self.votes_per_prompt})")
        if self.margin is not None and not 0.0 <= self.margin < 1.0:
            raise ValueError(f"margin must be in [0, 1) or null (got {self.margin})")


@METHODS.register("ttrl")
class TTRL(Method):
    """TTRL: reward = agreement with the agent's own plurality vote."""

    name = "ttrl"
    label = "TTRL"
    independent_agents = True
    table_order = 20
    min_agents = 1
    uses_labels = False
    extra_cost = "votes_per_prompt - samples_per_prompt extra generations per prompt (0 by default)"
    reference = "TTRL, arXiv 2504.16084; PRIME-RL/TTRL verl/verl/workers/reward_manager/ttrl.py"
    Options = TTRLOptions

    def generation_n(self, samples_per_prompt: int) -> int:
        v = self.options.votes_per_prompt
        if v and v < samples_per_prompt:
            raise ConfigError(f"method.options.votes_per_prompt ({v}) must be >= rollout.samples_per_prompt "
                              f"({samples_per_prompt}); set it to 0 to vote on the trained samples")
        return max(v, samples_per_prompt)

    def teachers(self) -> dict[str, list[str]]:
        return {a.name: [a.name] for a in self.agents}

    def rewards(self, batch: RewardInput) -> dict[str, AgentRewards]:
        k = batch.samples_per_prompt
        out = {}
        for name, ro in batch.rollouts.items():
            labels = [plurality_vote(ans, margin=self.options.margin).label for ans in ro.answers]  # all samples
            rewards = [[1.0 if (lb is not None and a is not None and is_equivalent(a, lb)) else 0.0 for a in ans[:k]]
                       for ans, lb in zip(ro.answers, labels)]
            out[name] = AgentRewards(rewards=rewards, pseudo_labels=labels)
        return out
