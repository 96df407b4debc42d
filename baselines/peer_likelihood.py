"""Peer likelihood (after CME, "Label-Free RL via Cross-Model Entropy", arXiv 2605.29009): reward = the mean
log-likelihood of my completion under my *peer's* model. No vote, no answer extraction: the second axis of Co-RL's
ablations (the peer's likelihood of my answer instead of the peer's vote).

No code is public ("upon publication"), so this is **unofficial**, built from the abstract's rule: the reward of a
response is its mean token log-likelihood under a separate model, used directly as the GRPO reward. Here the
separate model is the cohort's peer — Co-RL's directed ring (agent n is scored by agent n-1) or, with
``peers: all``, the mean over every other agent — and it is the peer's *current* policy (CME scores with a frozen
verifier; ``corl-frozen-peer`` is the frozen-teacher control of the vote axis). Each completion is re-encoded by the
peer's tokenizer and read as the reply to the peer's own request for the problem (its chat template and prompt
format; :data:`corl_bench.method.Likelihood`), so agents of different families score each other. The mean is over
the reply's tokens in the peer's tokenizer at temperature 1; an empty reply is scored as the peer's end-of-sequence
token alone. Not decided by the abstract and chosen here: the prompt conditions the score; no length penalty.

Cost: one scoring forward per peer over my P x K completions, without grad (``memory.micro_batch`` rows at a time).
"""

from __future__ import annotations

from dataclasses import dataclass

from corl_bench.method import METHODS, AgentRewards, Method, RewardInput

PEERS = ("ring", "all")


@dataclass(frozen=True)
class PeerLikelihoodOptions:
    peers: str = "ring"
    """ring (agent n is scored by agent n-1, as Co-RL's labels) | all (mean over every other agent)"""

    def __post_init__(self) -> None:
        if self.peers not in PEERS:
            raise ValueError(f"peers must be one of {', '.join(PEERS)} (got {self.peers!r})")


@METHODS.register("peer-likelihood", aliases=("cme",))
class PeerLikelihood(Method):
    """Peer likelihood (unofficial): reward = mean log-likelihood of my completion under my peer's policy."""

    name = "peer-likelihood"
    label = "Peer likelihood"
    official = False
    cohort_labels = {"same-family": "same family", "cross-family": "cross-family"}
    table_order = 77  # not in the Co-RL paper's table: after its rows, beside the Co-RL variants
    min_agents = 2
    uses_labels = False
    extra_cost = "one no-grad scoring forward per peer over my P x K completions"
    reference = ("CME, arXiv 2605.29009 (no public code; from the abstract: reward = mean log-likelihood of the "
                 "response under another model); here the peer is the cohort's")
    Options = PeerLikelihoodOptions

    def teachers(self) -> dict[str, list[str]]:
        names = [a.name for a in self.agents]
        if self.options.peers == "ring":
            return {n: [names[i - 1]] for i, n in enumerate(names)}
        return {n: [m for m in names if m != n] for n in names}

    def rewards(self, batch: RewardInput) -> dict[str, AgentRewards]:
        if batch.likelihood is None or batch.prompts is None:
            raise RuntimeError("peer-likelihood needs the peers' scoring forward; the trainer passes "
                               "RewardInput.likelihood and RewardInput.prompts")
        k, n_prompts = batch.samples_per_prompt, len(batch.problem_ids)
        teachers = self.teachers()
        # every peer scores, in one call, the completions of each agent it teaches (in cohort order)
        requests: dict[str, list] = {}
        texts: dict[str, list[str]] = {}
        for student, peers in teachers.items():
            comps = batch.rollouts[student].completions
            for peer in peers:
                requests.setdefault(peer, []).extend(batch.prompts[peer][i] for i in range(n_prompts) for _ in range(k))
                texts.setdefault(peer, []).extend(comps[i][j] for i in range(n_prompts) for j in range(k))
        scores = {peer: iter(s) for peer, s in batch.likelihood(requests, texts).items()}  # read in the same order
        out = {}
        for student, peers in teachers.items():
            parts = [[next(scores[peer]) for _ in range(n_prompts * k)] for peer in peers]
            flat = [sum(col) / len(peers) for col in zip(*parts)]
            rewards = [flat[i * k: (i + 1) * k] for i in range(n_prompts)]
            out[student] = AgentRewards(rewards=rewards, pseudo_labels=None,
                                        metrics={"peer_loglik": sum(flat) / max(1, len(flat))})
        return out
