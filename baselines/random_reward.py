"""Random-reward control: Bernoulli(p) rewards, independent of everything the model wrote.

It separates the effect of a label-free signal from the mere act of GRPO updates (Shao et al., arXiv 2506.10947,
"spurious rewards": on some models even random rewards raise benchmark scores; methods.md section 2). Rewards are
drawn from a stream seeded by (seed, step, agent), so a rerun reproduces them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from corl_bench.method import METHODS, AgentRewards, Method, RewardInput


@dataclass(frozen=True)
class RandomRewardOptions:
    p: float = 0.5
    """probability of reward 1"""
    seed: int = 0
    """seed of the reward stream (drawn per step and agent, so a rerun gets the same rewards)"""

    def __post_init__(self) -> None:
        if not 0.0 <= self.p <= 1.0:
            raise ValueError(f"p must be in [0, 1] (got {self.p})")


@METHODS.register("random-reward")
class RandomReward(Method):
    """Control: reward ~ Bernoulli(p), independent of the completion."""

    name = "random-reward"
    label = "Random reward"
    kind = "control"
    independent_agents = True
    table_order = 90
    min_agents = 1
    uses_labels = False
    extra_cost = "none"
    reference = "control; spurious rewards, arXiv 2506.10947"
    Options = RandomRewardOptions

    def rewards(self, batch: RewardInput) -> dict[str, AgentRewards]:
        k, out = batch.samples_per_prompt, {}
        for name, ro in batch.rollouts.items():
            rng = random.Random(f"{self.options.seed}/{batch.step}/{name}")
            rewards = [[1.0 if rng.random() < self.options.p else 0.0 for _ in range(k)] for _ in ro.answers]
            out[name] = AgentRewards(rewards=rewards)
        return out
