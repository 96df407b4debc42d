"""SCRL, "What If Consensus Lies?" (arXiv 2603.19880): selective positives and entropy-gated negatives on the
prompt's own vote.

Follows ``Jasper-Yan/SCRL`` @06535a1 (``verl/verl/trainer/ppo/scrl_utils.py::determine_pseudo_labels`` and
``verl/verl/utils/reward_score/scrl_math/__init__.py::reward_func``; defaults from
``verl/verl/trainer/config/ppo_trainer_scrl.yaml``). Per prompt, over its rollouts' extracted answers ``a_i`` and
mean token entropies ``H_i`` (full vocabulary, softmax(logits / T), from the trainer's forward pass, as RENT's):

* shares ``p(a) = count(a) / n`` over **all** n rollouts (a rollout without an answer stays in the denominator);
  ``Hc(a)`` = mean entropy of the rollouts answering ``a``; ``Hbar`` = mean entropy of all n rollouts;
* **selective positive**: the most common answer ``y+`` is the label only if ``p(y+) >= tau_pos`` and, when a
  second answer exists, ``p(y+) - p(second) > tau_marg`` (ties at the top: no label; the prompt is still trained
  on, with negatives only);
* **entropy-gated negatives**: every other answer with ``p(a) < tau_low`` and ``Hc(a) >= Hbar`` (rare *and*
  uncertain);
* reward, ``reward_mode: binary`` (the config's default): +1 for an answer equivalent to ``y+``, -1 for one
  equivalent to a negative, 0 otherwise; ``continuous`` (the paper's run script): ``a_plus * p(a) - pen`` for a
  positive, ``-a_minus * (tau_low - p(a)) - pen`` for a negative and ``-pen`` otherwise, with the entropy penalty
  ``pen = lambda_h * (Hc(a) - Hbar)``; a rollout without an answer gets -1 in both modes.

Defaults are the config file's (tau_pos 0.5, tau_marg 0.15, tau_low 0.15, binary, a_plus = a_minus = 1,
lambda_h 0.1); the paper's run script uses tau_pos 0.375, tau_marg 0.125, tau_low 0.125 and continuous rewards.

Deviations: the release votes on 32 rollouts and trains on the first 16; here the vote is over the K trained
rollouts (whose entropies the trainer's forward pass computes), so set rollout.samples_per_prompt to the voting
size. Answers are grouped by the project's normalised answer string (the release: a sympy-simplified string) and
matched to ``y+`` and the negatives with the project's math-verify equivalence (the release: its ``grade``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from corl_bench.method import METHODS, AgentRewards, Method, RewardInput, is_equivalent

MODES = ("binary", "continuous")


@dataclass(frozen=True)
class SCRLOptions:
    tau_pos: float = 0.5
    """the top answer's minimum share of all rollouts to be a positive label"""
    tau_marg: float = 0.15
    """the top share must exceed the second answer's by more than this"""
    tau_low: float = 0.15
    """an answer below this share whose mean entropy is at least the prompt's is a negative"""
    reward_mode: str = "binary"
    """binary (+1 / -1 / 0) | continuous (share- and entropy-shaped, the paper's run script)"""
    a_plus: float = 1.0
    """continuous: scale of a positive's share"""
    a_minus: float = 1.0
    """continuous: scale of a negative's distance below tau_low"""
    lambda_h: float = 0.1
    """continuous: weight of the entropy penalty lambda_h * (Hc(a) - Hbar)"""

    def __post_init__(self) -> None:
        for name in ("tau_pos", "tau_marg", "tau_low"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1] (got {getattr(self, name)})")
        if self.reward_mode not in MODES:
            raise ValueError(f"reward_mode must be one of {', '.join(MODES)} (got {self.reward_mode!r})")
        if self.a_plus < 0 or self.a_minus < 0 or self.lambda_h < 0:
            raise ValueError("a_plus, a_minus and lambda_h must be >= 0")


@dataclass(frozen=True)
class PromptLabels:
    """One prompt's SCRL labels: the positive (or None), the negatives, shares and class entropies."""

    positive: str | None
    negatives: tuple[str, ...]
    share: dict[str, float]
    class_entropy: dict[str, float]
    mean_entropy: float


def prompt_labels(answers: list[str | None], entropy: list[float], opt: SCRLOptions) -> PromptLabels:
    """SCRL's ``determine_pseudo_labels`` for one prompt (answers and entropies of the same n rollouts)."""
    n = len(answers)
    counts = Counter(a for a in answers if a is not None)
    share = {a: c / n for a, c in counts.items()}
    groups: dict[str, list[float]] = {}
    for a, h in zip(answers, entropy):
        if a is not None:
            groups.setdefault(a, []).append(h)
    class_entropy = {a: sum(hs) / len(hs) for a, hs in groups.items()}
    mean_entropy = sum(entropy) / n if n else 0.0
    ranked = counts.most_common()
    positive = None
    if ranked and share[ranked[0][0]] >= opt.tau_pos:
        top = ranked[0][0]
        if len(ranked) == 1 or share[top] - share[ranked[1][0]] > opt.tau_marg:
            positive = top
    negatives = tuple(a for a in counts if a != positive and share[a] < opt.tau_low
                      and class_entropy[a] >= mean_entropy)
    return PromptLabels(positive, negatives, share, class_entropy, mean_entropy)


@METHODS.register("scrl")
class SCRL(Method):
    """SCRL: +1 for a clear-majority answer, -1 for rare high-entropy answers (and no answer), 0 otherwise."""

    name = "scrl"
    label = "SCRL"
    independent_agents = True
    table_order = 87  # not in the Co-RL paper's table: after its rows, before the controls
    min_agents = 1
    uses_labels = False
    extra_cost = "none (entropies from the training forward pass)"
    reference = "SCRL, arXiv 2603.19880; Jasper-Yan/SCRL verl/verl/trainer/ppo/scrl_utils.py (determine_pseudo_labels)"
    Options = SCRLOptions

    def teachers(self) -> dict[str, list[str]]:
        return {a.name: [a.name] for a in self.agents}

    def rewards(self, batch: RewardInput) -> dict[str, AgentRewards]:
        if batch.stats is None:
            raise RuntimeError("scrl needs per-rollout entropies; the trainer passes them in RewardInput.stats")
        k, opt = batch.samples_per_prompt, self.options
        out = {}
        for name, ro in batch.rollouts.items():
            rewards, positives, n_neg, n_all = [], [], 0, 0
            for answers, entropy in zip(ro.answers, batch.stats[name].entropy):
                answers = list(answers[:k])
                lab = prompt_labels(answers, list(entropy[:k]), opt)
                row = []
                for a in answers:
                    r, negative = self._reward(a, lab)
                    row.append(r)
                    n_neg += negative
                rewards.append(row)
                positives.append(lab.positive)
                n_all += len(answers)
            n = max(1, len(positives))
            metrics = {"labeled_fraction": sum(p is not None for p in positives) / n,
                       "negative_fraction": n_neg / max(1, n_all)}
            out[name] = AgentRewards(rewards=rewards, pseudo_labels=positives, metrics=metrics)
        return out

    def _reward(self, answer: str | None, lab: PromptLabels) -> tuple[float, bool]:
        """(reward, whether it is a negative) of one rollout."""
        if answer is None:
            return -1.0, False
        opt = self.options
        pos = lab.positive is not None and is_equivalent(answer, lab.positive)
        neg = not pos and any(is_equivalent(answer, b) for b in lab.negatives)
        if opt.reward_mode == "binary":
            return (1.0 if pos else -1.0 if neg else 0.0), neg
        pen = opt.lambda_h * (lab.class_entropy.get(answer, lab.mean_entropy) - lab.mean_entropy)
        p = lab.share.get(answer, 0.0)
        if pos:
            return opt.a_plus * p - pen, False
        if neg:
            return -opt.a_minus * (opt.tau_low - p) - pen, True
        return -pen, False
