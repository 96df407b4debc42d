"""SRT, self-rewarded training (Shafayat et al., "Can Large Reasoning Models Self-Train?", arXiv 2505.21444):
reward = agreement with the majority vote of the prompt's own samples, with the paper's consistency filters.

Follows ``tajwarfahim/srt`` (``verl/workers/reward_manager/self_learning.py::SelfLearningRewardManager``,
``calculate_ground_truth_answers`` and ``__call__``; defaults from ``experiment_scripts/srt.sh``):

* the vote: the parsable answers of the prompt's K samples (unparsable ones do not vote) are counted by exact
  string (``Counter.most_common``: ties go to the answer seen first); the majority share is
  ``count / number of parsable answers``;
* hard reward (default): a prompt whose majority share is below ``self_consistency_threshold`` (or that has no
  parsable answer) is unlabeled and all its samples get 0; otherwise a sample gets 1 iff its answer is equivalent
  to the majority answer (the reference grades the response against it with its math grader);
* ``oversampling_keep_fraction`` < 1 (hard reward only): of the P prompts of the batch, only the
  ``int(P * fraction)`` labeled ones with the highest majority share are trained on (a stable sort, so ties keep
  batch order); the others are dropped;
* ``soft_reward: true``: no threshold and no dropping; a sample's reward is the vote share of every distinct
  parsable answer it is equivalent to, summed (usually just its own answer's share).

Defaults: ``self_consistency_threshold: 0.0`` and ``oversampling_keep_fraction: 1.0`` as the published SRT script
(``srt.sh``) runs; the reference's config file defaults the threshold to 0.6. The reference ignores the threshold
and the keep fraction when ``soft_reward`` is on; here setting them together is refused (a one-line ConfigError)
rather than silently ignored.

Deviations: a dropped prompt stays in the batch with reward 0 on every sample (a constant group: zero GRPO
advantage, so no gradient) instead of being removed, so it still counts in the loss normaliser; the reference also
removes the KL term from unlabeled prompts (``remove_kl_loss_from_unlabeled_examples``), which the harness does not
(the KL coefficient is 0 by default, so this only matters with ``grpo.kl_coef`` > 0); at least one prompt is kept
where ``int(P * fraction)`` is 0 (the reference asserts). Equivalence is the project's math-verify verifier on
extracted answers. Every agent trains on its own rollouts; the keep fraction is applied to each agent's batch.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from corl_bench.method import METHODS, AgentRewards, Method, RewardInput, is_equivalent, plurality_vote


@dataclass(frozen=True)
class SRTOptions:
    self_consistency_threshold: float = 0.0
    """a prompt whose majority share (of parsable answers) is below this gets no reward (srt.sh: 0.0)"""
    soft_reward: bool = False
    """reward = the vote share of the sample's answer instead of 1/0 agreement with the majority"""
    oversampling_keep_fraction: float = 1.0
    """train only on this fraction of the batch's prompts: the labeled ones with the highest majority share"""

    def __post_init__(self) -> None:
        if not isinstance(self.soft_reward, bool):
            raise ValueError(f"soft_reward must be true or false (got {self.soft_reward!r})")
        if not 0.0 <= self.self_consistency_threshold <= 1.0:
            raise ValueError(f"self_consistency_threshold must be in [0, 1] (got {self.self_consistency_threshold})")
        if not 0.0 < self.oversampling_keep_fraction <= 1.0:
            raise ValueError(f"oversampling_keep_fraction must be in (0, 1] (got {self.oversampling_keep_fraction})")
        if self.soft_reward and (self.self_consistency_threshold > 0.0 or self.oversampling_keep_fraction < 1.0):
            raise ValueError("soft_reward uses neither self_consistency_threshold nor oversampling_keep_fraction "
                             "(as the reference); leave them at 0.0 and 1.0 or set soft_reward: false")


@METHODS.register("srt")
class SRT(Method):
    """SRT: reward = agreement with the prompt's own majority vote, with consistency filtering."""

    name = "srt"
    label = "SRT"
    independent_agents = True
    table_order = 86  # not in the Co-RL paper's table: after its rows, before the controls
    min_agents = 1
    uses_labels = False
    extra_cost = "none"
    reference = "SRT, arXiv 2505.21444; tajwarfahim/srt verl/workers/reward_manager/self_learning.py"
    Options = SRTOptions

    def teachers(self) -> dict[str, list[str]]:
        return {a.name: [a.name] for a in self.agents}

    def rewards(self, batch: RewardInput) -> dict[str, AgentRewards]:
        k, opt = batch.samples_per_prompt, self.options
        out = {}
        for name, ro in batch.rollouts.items():
            answers = [list(ans[:k]) for ans in ro.answers]
            votes = [plurality_vote(ans) for ans in answers]
            shares = [v.count / v.n_valid if v.n_valid else 0.0 for v in votes]
            if opt.soft_reward:
                rewards = [self._soft(ans) for ans in answers]
                labels = [v.label for v in votes]
                kept = len(answers)
            else:
                labels = [v.label if (v.label is not None and s >= opt.self_consistency_threshold) else None
                          for v, s in zip(votes, shares)]
                labelled = sum(lb is not None for lb in labels)
                if opt.oversampling_keep_fraction < 1.0:
                    n_keep = max(1, int(len(answers) * opt.oversampling_keep_fraction))
                    ranked = sorted((i for i, lb in enumerate(labels) if lb is not None), key=lambda i: -shares[i])
                    keep = set(ranked[:n_keep])
                    labels = [lb if i in keep else None for i, lb in enumerate(labels)]
                kept = sum(lb is not None for lb in labels)
                rewards = [[1.0 if (lb is not None and a is not None and is_equivalent(a, lb)) else 0.0 for a in ans]
                           for ans, lb in zip(answers, labels)]
            n = max(1, len(answers))
            metrics = {"majority_share": sum(shares) / n, "kept_fraction": kept / n}
            if not opt.soft_reward:
                metrics["labeled_fraction"] = labelled / n
            out[name] = AgentRewards(rewards=rewards, pseudo_labels=labels, metrics=metrics)
        return out

    @staticmethod
    def _soft(answers: list[str | None]) -> list[float]:
        counts = Counter(a for a in answers if a is not None)
        n_valid = sum(counts.values())
        return [0.0 if a is None else sum(c / n_valid for b, c in counts.items() if is_equivalent(a, b))
                for a in answers]
