"""EMPO (Zhang et al., arXiv 2504.05812): reward = the share of the sample's semantic cluster (semantic-entropy
minimisation as a soft majority vote).

Follows ``QingyangZhang/EMPO`` (``trl/src/open_r1/rewards.py::get_empo_math_reward`` with
``semantic_uncertainty.py::get_semantic_ids_by_rule``, the paper's math recipe; the later verl port is
``verl-empo/verl/utils/reward_score/empo/compute_metrics.py::empo_metrics``, reward type ``entropy``):

* the K answers of a prompt are clustered by equivalence: each answer joins the first cluster whose first member it
  is equivalent to (:func:`corl_bench.method.is_equivalent`, the project's math-verify verifier), else opens a new
  one; a sample without an answer is a cluster of its own (in the reference ``verify('', '')`` is False and the
  verl port says so explicitly), so it counts towards the entropy but never towards another sample's share;
* the semantic entropy of the prompt is ``H = -sum_c p_c log p_c`` over the cluster shares ``p_c = |c| / K``;
* a prompt is rewarded only when ``H < log K`` — not every answer distinct (the reference's "entropy thresholding to
  filter out highly unreliable answers"); then a sample's reward is its cluster's share ``p_c``, 0 for a sample
  without an answer; otherwise every sample of the prompt gets 0.

Options generalise that filter to the paper's two thresholds, as fractions of the maximum entropy ``log K`` (the
form the verl port sketches, ``min_valid = low * max_entropy``): a prompt is rewarded iff
``min_entropy * log K <= H < max_entropy * log K``. The defaults 0 and 1 are exactly the reference's math rule.
The comparison allows 1e-9 of floating-point slack, so an all-distinct group is filtered whatever the rounding of
its entropy. The pseudo-label (for diagnostics only) is the first member of the largest cluster of a rewarded prompt.

Deviations: equivalence is ``math-verify`` through the project's verifier on the extracted, normalised answers,
instead of the reference's ``math_verify.parse(..., boxed_match_priority=0)`` + ``verify`` on the completion text;
where equivalence is not transitive, the reference's trl clustering may move a later answer to a later
representative's cluster, while this (like the verl port) keeps the first match. The verl port's unused
``confidence >= 0.25`` filter and its ``entropy_thres`` setting (read but never applied) are not implemented.
Every agent trains on its own rollouts (no peer signal).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from corl_bench.method import METHODS, AgentRewards, Method, RewardInput, is_equivalent

SLACK = 1e-9  # floating-point slack of the entropy thresholds


@dataclass(frozen=True)
class EMPOOptions:
    min_entropy: float = 0.0
    """reward a prompt only if its semantic entropy is >= this fraction of log K (0 = no lower bound, reference)"""
    max_entropy: float = 1.0
    """reward a prompt only if its semantic entropy is < this fraction of log K (1 = the reference: a group whose
    answers are all distinct gets nothing)"""

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_entropy < self.max_entropy <= 1.0:
            raise ValueError(f"need 0 <= min_entropy < max_entropy <= 1 (got min_entropy={self.min_entropy}, "
                             f"max_entropy={self.max_entropy}); both are fractions of the maximum entropy log K")


def semantic_clusters(answers: list[str | None]) -> list[int]:
    """Cluster id of each answer: the first cluster whose first member it is equivalent to, else a new one; every
    None is a cluster of its own."""
    ids: list[int] = []
    heads: list[str | None] = []  # first member of each cluster (None for an unanswered singleton)
    for a in answers:
        match = None
        if a is not None:
            match = next((c for c, h in enumerate(heads) if h is not None and is_equivalent(a, h)), None)
        if match is None:
            heads.append(a)
            match = len(heads) - 1
        ids.append(match)
    return ids


def empo_group(answers: list[str | None], min_entropy: float = 0.0,
               max_entropy: float = 1.0) -> tuple[list[float], str | None, float]:
    """(rewards, pseudo-label, semantic entropy) of one prompt's samples; the pseudo-label is None when the prompt
    is filtered out (or has no answer)."""
    n = len(answers)
    if n == 0:
        return [], None, 0.0
    ids = semantic_clusters(answers)
    counts = [ids.count(c) for c in range(max(ids) + 1)]
    shares = [c / n for c in counts]
    entropy = -sum(p * math.log(p) for p in shares)
    top = math.log(n)
    if not (min_entropy * top - SLACK <= entropy < max_entropy * top - SLACK):
        return [0.0] * n, None, entropy
    rewards = [0.0 if a is None else shares[c] for a, c in zip(answers, ids)]
    answered = [(counts[c], -i, a) for i, (a, c) in enumerate(zip(answers, ids)) if a is not None]
    label = max(answered)[2] if answered else None  # largest cluster, first seen on ties
    return rewards, label, entropy


@METHODS.register("empo")
class EMPO(Method):
    """EMPO: reward = share of the sample's semantic cluster; no reward where every answer is distinct."""

    name = "empo"
    label = "EMPO"
    independent_agents = True
    table_order = 85  # not in the Co-RL paper's table: after its rows, before the controls
    min_agents = 1
    uses_labels = False
    extra_cost = "none (O(K x clusters) equivalence checks per prompt)"
    reference = "EMPO, arXiv 2504.05812; QingyangZhang/EMPO trl/src/open_r1/rewards.py::get_empo_math_reward"
    Options = EMPOOptions

    def teachers(self) -> dict[str, list[str]]:
        return {a.name: [a.name] for a in self.agents}

    def rewards(self, batch: RewardInput) -> dict[str, AgentRewards]:
        k, lo, hi = batch.samples_per_prompt, self.options.min_entropy, self.options.max_entropy
        out = {}
        for name, ro in batch.rollouts.items():
            groups = [empo_group(list(ans[:k]), lo, hi) for ans in ro.answers]
            rewards = [g[0] for g in groups]
            labels = [g[1] for g in groups]
            top = math.log(k) if k > 1 else 1.0
            metrics = {"semantic_entropy": sum(g[2] for g in groups) / max(1, len(groups)),
                       "normalised_entropy": sum(g[2] / top for g in groups) / max(1, len(groups)),
                       "filtered_fraction": sum(lb is None for lb in labels) / max(1, len(labels))}
            out[name] = AgentRewards(rewards=rewards, pseudo_labels=labels, metrics=metrics)
        return out
