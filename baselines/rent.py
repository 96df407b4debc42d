"""RENT (Prabhudesai et al., arXiv 2505.22660): reward = minus the mean token entropy of the response.

Follows ``satrams/rent-rl`` (``verl/trainer/ppo/ray_trainer.py``, the ``minimize_entropy`` branch; methods.md
section 4): per-token entropies of softmax(logits / T_rollout) over the full vocabulary, averaged over **all**
response tokens, come from the same training-side forward pass that yields the log-probs (the trainer's single
forward pass; no second pass over the model). With the official ``format`` recipe (``base_format=True``), a response
without a ``\\boxed{}`` answer gets entropy ``entropy_base = 7.0``, i.e. reward -7; ``no_answer_entropy: null`` turns
that off. The paper's "last chunk" variant is not in the released trainer and is not implemented.
"""

from __future__ import annotations

from dataclasses import dataclass

from corl_bench.method import METHODS, AgentRewards, Method, RewardInput, has_boxed


@dataclass(frozen=True)
class RENTOptions:
    no_answer_entropy: float | None = 7.0
    """entropy assigned to a response without a \\boxed{} answer (official format recipe); null = no penalty"""


@METHODS.register("rent")
class RENT(Method):
    """RENT: reward = -mean token entropy of the response (plus the official format penalty)."""

    name = "rent"
    label = "RENT"
    independent_agents = True
    table_order = 30
    min_agents = 1
    uses_labels = False
    extra_cost = "none (full-vocab entropy from the training forward pass)"
    reference = "RENT, arXiv 2505.22660; satrams/rent-rl verl/trainer/ppo/ray_trainer.py (minimize_entropy)"
    Options = RENTOptions

    def rewards(self, batch: RewardInput) -> dict[str, AgentRewards]:
        if batch.stats is None:
            raise RuntimeError("rent needs per-rollout entropies; the trainer passes them in RewardInput.stats")
        k, penalty = batch.samples_per_prompt, self.options.no_answer_entropy
        out = {}
        for name, ro in batch.rollouts.items():
            ent = batch.stats[name].entropy
            rewards = [[-(penalty if (penalty is not None and not has_boxed(text)) else h)
                        for h, text in zip(ent[i], ro.completions[i][:k])] for i in range(len(ent))]
            out[name] = AgentRewards(rewards=rewards)
        return out
