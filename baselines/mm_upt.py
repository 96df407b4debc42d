"""MM-UPT (Wei et al., arXiv 2505.22453): reward = agreement with the agent's own majority vote over its 10 samples.

Follows ``waltonfuture/MM-UPT`` at commit ``f51d7b68b3984cf400d5ae6ccc72978cc3ffa75e`` (2025-06-12; the reward file
is unchanged since the first commit ``81994ed``), an EasyR1 fork; methods.md section 7. Read:

* ``verl/workers/reward/function.py`` (``FunctionRewardManager.__call__``): each response's answer is
  ``mathruler.grader.extract_boxed_content(response)`` (the last ``\\boxed{}``, or the string ``"None"`` when there
  is none); the label of a prompt is ``Counter(its n answers).most_common(1)[0][0]`` over the **same n rollouts
  that are trained on** (no separate voting pool); each response gets ``1.0 if grade_answer(answer, label) else
  0.0`` (mathruler math equivalence); the configured score function and the ground truth are never used; no
  format reward, no threshold, no filter.
* ``mathruler/grader.py`` (``hiyouga/MathRuler`` @ ``14dadeb0``): ``grade_answer("None", "None")`` is True (equal
  strings after normalisation).

**Where it differs from TTRL (``baselines/ttrl.py``), and what this file does:**

1. *Responses without an answer vote.* In MM-UPT the ``"None"`` string of every response without a ``\\boxed{}``
   is one more candidate in the vote and can win it; TTRL (here) drops no-answer responses from the vote.
   ``no_answer_votes: true`` (default) does what MM-UPT does.
2. *A no-answer majority rewards the no-answer responses.* When ``"None"`` wins, ``grade_answer("None", "None")``
   gives every response without an answer reward **1** and every answered response 0; TTRL labels the prompt
   with the majority of the answered responses and gives the others 0. The pseudo-label logged is then the string
   ``"None"`` (:data:`NO_ANSWER_LABEL`, MM-UPT's own label string; ``label/accuracy`` counts it wrong unless the
   true answer is literally "None") and ``method/no_answer_label_fraction`` counts such prompts. With *no* answer
   at all every response gets 1 (TTRL: unlabeled, all 0) — a zero-variance group either way, so the same (zero)
   advantage.
3. *Ties* go to the candidate seen first in both (``Counter.most_common``), but here the no-answer candidate takes
   part: ``[None, "3", None, "3"]`` is labelled "no answer" (TTRL: "3").
4. *Only ``\\boxed{}`` answers count* (``boxed_only: true``, default): a completion without a non-empty balanced
   ``\\boxed{}`` has no answer, whatever the harness's shared extractor would fall back to (answer phrases, the
   last number), as TTRL uses. The boxed answer is the shared extractor's normalised one (Hendrycks-MATH
   normalisation), so the vote is by equality of normalised answers rather than of raw boxed strings.
5. *No vote/train split*: always votes on the K trained samples (TTRL's ``votes_per_prompt: 0``).

With ``boxed_only: false`` and ``no_answer_votes: false`` the rewards equal TTRL's with ``votes_per_prompt: 0``.

**Recipe** (``configs/mm-upt.yaml``; ``corl-bench run --method mm-upt --config configs/mm-upt.yaml``). Values from
``examples/config.yaml`` (EC) and ``examples/qwen2_5_vl_7b_mmr1.sh`` (SH) of the commit above, defaults from its
``verl/workers/actor/config.py`` (AC), ``verl/trainer/core_algos.py`` (CA):

==========================  ===========================================  =====================================
reference                   value                                        harness key (in the config file?)
==========================  ===========================================  =====================================
rollout n / reward n        10 (EC ``worker.rollout.n``, ``reward.n``)   rollout.samples_per_prompt=10 (yes)
temperature / top-p         0.7 / 0.99 (EC ``worker.rollout``)           rollout.temperature, top_p (yes)
KL                          k3 ``low_var_kl`` loss, 1e-2 (EC algorithm)  grpo.kl_coef=0.01 (yes; the harness's
                                                                         KL is k3 clamped to [-10, 10])
clip                        0.2 / 0.3, dual clip 3.0 (AC defaults)       grpo.clip_low/high (yes); dual clip
                                                                         is not a harness setting (not applied)
loss aggregation            masked token mean per micro-batch (CA        grpo.loss_agg=token-mean (yes)
                            ``compute_policy_loss``, ``masked_mean``)
advantage                   GRPO, (r - mean) / (unbiased std + 1e-6)     grpo.scale_std, adv_eps (defaults)
optimiser                   AdamW lr 1e-6 (EC), betas (0.9, 0.999),      weight_decay, betas (yes); lr: no
                            weight decay 1e-2 (AC/EC), no warmup,        (model-scale; ``--set grpo.lr=1e-6``
                            constant; grad clip 1.0 (EC)                 for a 7B model)
batch                       rollout batch 512 prompts (EC), global       rollout.prompts_per_step: no (one
                            (update) batch 128 prompts x n (EC; AC x n   update per step here, not 4 per
                            in ``fsdp_workers.py``), ppo_epochs 1        rollout batch)
max lengths                 prompt 2048, response 2048 (EC ``data``)     rollout.max_new_tokens: no (the micro
                                                                         models have 128 positions;
                                                                         ``--set rollout.max_new_tokens=2048``)
training length             15 episodes (EC, SH)                         run.steps: no
model / data                Qwen2.5-VL-7B-Instruct on MMR1-Math-RL-      cohort / data.train: no
                            Data-v0 (SH), labels unused
prompt suffix               "Please reason step by step, and put your    the profile's prompt
                            final answer within \\boxed{}." (SH)
evaluation                  T = 0.5, n = 1 (EC val_override_config);     eval.*: no
                            README's vLLM example: T = 0.2
==========================  ===========================================  =====================================

Other deviations: equivalence with the label uses the harness's verifier (:func:`is_equivalent`: numeric, then
``math_verify``), not ``mathruler.grade_answer`` (which, e.g., refuses unreduced fractions and requires an exact
match for integer labels); an empty ``\\boxed{}`` (mathruler: ``""``, its own candidate) counts as no answer.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from corl_bench.method import METHODS, AgentRewards, Method, RewardInput, has_boxed, is_equivalent

NO_ANSWER_LABEL = "None"
"""The pseudo-label logged when "no answer" wins the vote (mathruler's ``extract_boxed_content`` returns it)."""


@dataclass(frozen=True)
class MMUPTOptions:
    no_answer_votes: bool = True
    """responses without an answer vote as one candidate ("None", as MM-UPT) and, when it wins, get reward 1;
    false = they are left out of the vote (TTRL)"""
    boxed_only: bool = True
    """only a \\boxed{} answer counts (mathruler's extract_boxed_content, as MM-UPT); false = the shared extractor
    (boxed, answer phrases, last number)"""


def majority(answers: Sequence[str | None], no_answer_votes: bool = True) -> tuple[str | None, bool]:
    """(label, no-answer won) of MM-UPT's vote: ``Counter.most_common`` over the answers, ties to the one seen
    first; ``None`` answers are one candidate when ``no_answer_votes``, else left out. ``(None, False)``: no
    candidate at all (unlabeled)."""
    votes = [a for a in answers if no_answer_votes or a is not None]
    if not votes:
        return None, False
    label = Counter(votes).most_common(1)[0][0]
    return label, label is None


@METHODS.register("mm-upt", aliases=("mmupt",))
class MMUPT(Method):
    """MM-UPT: reward = agreement with the agent's own majority vote over its K samples (no-answer votes too)."""

    name = "mm-upt"
    label = "MM-UPT"
    independent_agents = True
    table_order = 75  # not in the Co-RL paper's table: after its rows
    min_agents = 1
    uses_labels = False
    extra_cost = "none"
    reference = "MM-UPT, arXiv 2505.22453; waltonfuture/MM-UPT verl/workers/reward/function.py"
    Options = MMUPTOptions

    def teachers(self) -> dict[str, list[str]]:
        return {a.name: [a.name] for a in self.agents}

    def answers(self, answers: Sequence[str | None], completions: Sequence[str]) -> list[str | None]:
        """The answers MM-UPT sees: the shared extractor's, or None where ``boxed_only`` and no \\boxed{}."""
        if not self.options.boxed_only:
            return list(answers)
        return [a if (a is not None and has_boxed(text)) else None for a, text in zip(answers, completions)]

    def rewards(self, batch: RewardInput) -> dict[str, AgentRewards]:
        k, no_answer_votes = batch.samples_per_prompt, self.options.no_answer_votes
        out = {}
        for name, ro in batch.rollouts.items():
            labels: list[str | None] = []
            rewards: list[list[float]] = []
            no_answer_labels = 0
            for ans, comps in zip(ro.answers, ro.completions):
                seen = self.answers(ans[:k], comps[:k])  # votes on exactly the trained samples
                label, no_answer = majority(seen, no_answer_votes)
                if no_answer:
                    no_answer_labels += 1
                    labels.append(NO_ANSWER_LABEL)
                    rewards.append([1.0 if a is None else 0.0 for a in seen])
                else:
                    labels.append(label)
                    rewards.append([1.0 if (label is not None and a is not None and is_equivalent(a, label)) else 0.0
                                    for a in seen])
            out[name] = AgentRewards(rewards=rewards, pseudo_labels=labels, metrics={
                "no_answer_label_fraction": no_answer_labels / max(1, len(labels))})
        return out
