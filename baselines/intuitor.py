"""Intuitor (Zhao et al., arXiv 2505.19590): reward = the response's self-certainty, mean_t KL(U || p_t).

Follows ``sunblaze-ucb/Intuitor`` (``verl-intuitor/verl/utils/torch_functional.py::self_certainty_from_logits``;
methods.md section 5): per-token KL(U || softmax(logits / T_rollout)) over the full vocabulary, averaged over the
response tokens, computed online by the current policy in the training forward pass (no second pass). The official
code drops the constant -log V (its per-token value is logsumexp(z) - mean(z)); ours keeps it, which changes
nothing after group normalisation. No format heuristic beyond the prompt, as in the paper.
"""

from __future__ import annotations

from corl_bench.method import METHODS, AgentRewards, Method, RewardInput


@METHODS.register("intuitor")
class Intuitor(Method):
    """Intuitor: reward = mean token self-certainty KL(U || p) of the response."""

    name = "intuitor"
    label = "Intuitor"
    independent_agents = True
    table_order = 40
    min_agents = 1
    uses_labels = False
    extra_cost = "none (full-vocab self-certainty from the training forward pass)"
    reference = "Intuitor, arXiv 2505.19590; sunblaze-ucb/Intuitor verl-intuitor/verl/utils/torch_functional.py"

    def rewards(self, batch: RewardInput) -> dict[str, AgentRewards]:
        if batch.stats is None:
            raise RuntimeError("intuitor needs per-rollout self-certainty; the trainer passes RewardInput.stats")
        out = {}
        for name, ro in batch.rollouts.items():
            rewards = [list(row) for row in batch.stats[name].self_certainty]
            out[name] = AgentRewards(rewards=rewards)
        return out
