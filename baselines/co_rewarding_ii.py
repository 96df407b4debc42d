"""Co-rewarding-II (Zhang et al., arXiv 2508.00410): pseudo-label from a slowly updated EMA teacher of the policy.

Follows ``tmlr-group/Co-rewarding`` (``Co-rewarding-II/verl/workers/reward_manager/co_rewarding_II.py``,
``ray_trainer_coreward.py``, ``fsdp_vllm.py::_update_ref_model_sliding_average``; methods.md section 6):
* the teacher starts as the policy and, after every step, moves by EMA
  ``teacher <- alpha_t * policy + (1 - alpha_t) * teacher`` with ``alpha_t`` cosine-annealed from ``alpha_start``
  (0.01) to ``alpha_end`` (1e-5) over the run;
* the teacher **generates its own K rollouts** per prompt through the same rollout engine; the label is their
  plurality answer (empty answers excluded), and a policy rollout gets 1 iff its answer equals the label by
  **exact string** (of normalised answers, as the reference does — not math equivalence);
* the teacher doubles as the KL reference, so the KL anchor moves with it.

Deviation: the reference trains with KL 0.001; the harness keeps one ``grpo.kl_coef`` for every method (0 by
default, the paper's setting). Pass ``--set grpo.kl_coef=0.001`` to match Co-rewarding-II's recipe; the k3 term is
then taken against the EMA teacher.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from corl_bench.method import METHODS, AgentRewards, AuxiliaryModel, Method, RewardInput, plurality_vote


@dataclass(frozen=True)
class CoRewardingIIOptions:
    alpha_start: float = 0.01
    """EMA rate of the teacher toward the policy after the first update (cosine-annealed to alpha_end over the
    run)"""
    alpha_end: float = 1e-5
    """EMA rate of the teacher after the last update"""

    def __post_init__(self) -> None:
        if not (0.0 <= self.alpha_end <= 1.0 and 0.0 <= self.alpha_start <= 1.0):
            raise ValueError(f"alpha_start and alpha_end must be in [0, 1] (got {self.alpha_start}, {self.alpha_end})")


@METHODS.register("co-rewarding-ii", aliases=("corewarding-ii",))
class CoRewardingII(Method):
    """Co-rewarding-II: reward = exact agreement with the plurality answer of an EMA teacher's own rollouts."""

    name = "co-rewarding-ii"
    label = "Co-rewarding-II"
    independent_agents = True
    table_order = 50
    min_agents = 1
    uses_labels = False
    # the teacher: a copy of the initial policy that generates its own rollouts and is the KL anchor
    auxiliary = (AuxiliaryModel("teacher", generates=True, kl_reference=True),)
    extra_cost = "K teacher generations per prompt (2x generation); an EMA copy that is also the KL reference"
    reference = ("Co-rewarding, arXiv 2508.00410; tmlr-group/Co-rewarding "
                 "Co-rewarding-II/verl/workers/reward_manager/co_rewarding_II.py")
    Options = CoRewardingIIOptions

    def auxiliary_update(self, name: str, step: int, total_steps: int) -> float:
        a0, a1 = self.options.alpha_start, self.options.alpha_end
        return a1 + 0.5 * (a0 - a1) * (1.0 + math.cos(math.pi * step / max(1, total_steps)))

    def rewards(self, batch: RewardInput) -> dict[str, AgentRewards]:
        if batch.teacher_rollouts is None:
            raise RuntimeError("co-rewarding-ii needs teacher rollouts; the trainer generates them for teacher methods")
        k, out = batch.samples_per_prompt, {}
        for name, ro in batch.rollouts.items():
            labels = [plurality_vote(ans).label for ans in batch.teacher_rollouts[name].answers]
            rewards = [[1.0 if (lb is not None and a == lb) else 0.0 for a in ans[:k]]
                       for ans, lb in zip(ro.answers, labels)]
            out[name] = AgentRewards(rewards=rewards, pseudo_labels=labels)
        return out
