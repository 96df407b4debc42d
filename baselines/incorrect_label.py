"""Incorrect-label control (Shao et al., "Spurious Rewards: Rethinking Training Signals in RLVR", arXiv 2506.10947):
reward = agreement with a *wrong* label, the plurality vote over the prompt's wrong answers.

The paper's "incorrect" reward (``ruixin31/Rethink_RLVR``: labels ``code/data/DeepScaleR_mv_labeled_<model>_incorrect``,
built by ``code/scripts/majority_voting_labeling.py`` and ``relabel_data_based_on_mv_labels.py`` with
``filter='incorrect'``; reward ``math`` = ``qwen_eval.py::qwen_reward_fn``) is an *offline, fixed* label set: a
model (the repository ships sets from several, e.g. Qwen2.5-Math-7B) samples each DeepScaleR prompt 64 times
(``--num_rollout`` default) before training, the plurality of its non-empty answers is taken, and only the prompts
whose plurality is wrong are kept, labelled with it; training then rewards 1/0 math equivalence with that label.

Here the label is computed online from the agent's own K samples of the current step: the plurality vote
(:func:`corl_bench.method.plurality_vote`, exact string, ties to the first seen) over the answers *not equivalent
to the true label*; a sample gets 1 iff its answer is equivalent to that wrong label. A prompt with no wrong answer
(all correct, or no answer at all) gets no reward. With ``drop_correct_majority: true`` a prompt whose plurality
over *all* its answers is correct also gets no reward; the wrong label of every other prompt is then the plurality
itself, which is the paper's ``incorrect`` filter applied to the current policy each step.

Deviations (stated because this is a control, not a reproduction): the label comes from the policy being trained,
step by step, not from a fixed pre-computed set of a base model's 64 votes, so it moves as the policy moves; the
prompts are the run's training stream, not the filtered DeepScaleR subset; by default (``drop_correct_majority:
false``) prompts whose plurality is correct are still rewarded toward their most common wrong answer. It reads the
hidden labels (``uses_labels = True``) only to pick a wrong one; it is listed and tabled as a control, never
ranked. Equivalence is the project's math-verify verifier. Every agent trains on its own rollouts.
"""

from __future__ import annotations

from dataclasses import dataclass

from corl_bench.method import METHODS, AgentRewards, Method, RewardInput, is_equivalent, plurality_vote


@dataclass(frozen=True)
class IncorrectLabelOptions:
    drop_correct_majority: bool = False
    """no reward on a prompt whose plurality over all its answers is correct (the paper kept only prompts whose
    majority vote was wrong)"""

    def __post_init__(self) -> None:
        if not isinstance(self.drop_correct_majority, bool):
            raise ValueError(f"drop_correct_majority must be true or false (got {self.drop_correct_majority!r})")


def wrong_label(answers: list[str | None], truth: str, drop_correct_majority: bool = False) -> str | None:
    """The plurality answer among ``answers`` not equivalent to ``truth``; None where there is none (or, with
    ``drop_correct_majority``, where the plurality of all answers is correct)."""
    if drop_correct_majority:
        overall = plurality_vote(answers).label
        if overall is not None and is_equivalent(overall, truth):
            return None
    wrong = [a for a in answers if a is not None and not is_equivalent(a, truth)]
    return plurality_vote(wrong).label


@METHODS.register("incorrect-label")
class IncorrectLabel(Method):
    """Control: reward = agreement with the plurality of the prompt's wrong answers (reads the labels)."""

    name = "incorrect-label"
    label = "Incorrect label"
    kind = "control"
    independent_agents = True
    table_order = 94
    min_agents = 1
    uses_labels = True
    extra_cost = "none"
    reference = ("control; spurious rewards, arXiv 2506.10947; ruixin31/Rethink_RLVR "
                 "code/scripts/relabel_data_based_on_mv_labels.py (filter incorrect)")
    Options = IncorrectLabelOptions

    def teachers(self) -> dict[str, list[str]]:
        return {a.name: [a.name] for a in self.agents}

    def rewards(self, batch: RewardInput) -> dict[str, AgentRewards]:
        if batch.labels is None:
            raise RuntimeError("incorrect-label needs labels; the trainer passes them to methods with "
                               "uses_labels = True")
        k, drop = batch.samples_per_prompt, self.options.drop_correct_majority
        out = {}
        for name, ro in batch.rollouts.items():
            labels = [wrong_label(list(ans[:k]), truth, drop) for ans, truth in zip(ro.answers, batch.labels)]
            rewards = [[1.0 if (lb is not None and a is not None and is_equivalent(a, lb)) else 0.0 for a in ans[:k]]
                       for ans, lb in zip(ro.answers, labels)]
            metrics = {"labeled_fraction": sum(lb is not None for lb in labels) / max(1, len(labels))}
            out[name] = AgentRewards(rewards=rewards, pseudo_labels=labels, metrics=metrics)
        return out
