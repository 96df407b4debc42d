"""GT-Reward: the supervised reference. Reward 1 when the extracted answer is equivalent to the dataset answer.

The same verifier as evaluation (``corl_bench.grading.verifier``); no format reward, as in the reference GRPO scripts
(methods.md section 2). The only method that sees labels: it declares ``uses_labels = True``.
"""

from __future__ import annotations

from corl_bench.method import METHODS, AgentRewards, Method, RewardInput, is_equivalent


@METHODS.register("gt-reward", aliases=("gt", "grpo"))
class GTReward(Method):
    """GRPO with the ground-truth reward (uses labels; a reference, not a label-free method)."""

    name = "gt-reward"
    label = "GT-Reward"
    independent_agents = True
    table_order = 10
    min_agents = 1
    uses_labels = True
    extra_cost = "none"
    reference = "GRPO (DeepSeekMath); Co-RL llm/trainers/grpo/train_grpo.py"

    def rewards(self, batch: RewardInput) -> dict[str, AgentRewards]:
        if batch.labels is None:
            raise RuntimeError("gt-reward needs labels; the trainer passes them to methods with uses_labels = True")
        k = batch.samples_per_prompt
        out = {}
        for name, ro in batch.rollouts.items():
            rewards = [[1.0 if (a is not None and is_equivalent(a, gold)) else 0.0 for a in ans[:k]]
                       for ans, gold in zip(ro.answers, batch.labels)]
            out[name] = AgentRewards(rewards=rewards, pseudo_labels=list(batch.labels))
        return out
