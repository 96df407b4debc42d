"""Label-free diagnostics, computed every step for every agent.

The hidden ground truth is used *here*, for monitoring only — never by a label-free method's reward:

    reward/mean              mean reward of the trained rollouts
    reward/accuracy          share of rollouts whose pseudo reward equals the true reward (1[correct])
    reward/true_mean         share of trained rollouts that are actually correct (the GT reward they would get)
    label/accuracy           share of labelled prompts whose pseudo-label is the true answer
    label/coverage           share of prompts that received a label at all
    vote/majority_ratio      own plurality count / samples (TTRL's majority_ratio), mean over prompts
    peer/agreement           share of prompts where the agent's own vote equals another agent's vote (mean over
                             the other agents; absent for a single agent)
    adv/zero_std_fraction    share of groups with identical rewards (no gradient)
    policy/entropy, policy/kl, policy/grad_norm, policy/clip_fraction, loss
    len/mean, len/clipped_ratio   completion length in tokens; share that hit the token cap
    engine/logp_gap_mean, engine/logp_gap_max   |training forward - rollout engine| log-prob of the sampled tokens
                             (mean, max): <= 1.5e-7 / 1.2e-4 in fp32 over the default run while the engine holds
                             the trainer's weights; stale weights after a sync show at once (absent where the engine
                             returns no log-probs)
"""

from __future__ import annotations

from typing import Any, Sequence

from corl_bench.method import AgentRewards, AgentRollouts
from corl_bench.grading.verifier import Vote, is_equivalent


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def agent_diagnostics(*, rollouts: AgentRollouts, rewards: AgentRewards, truth: Sequence[str], k: int,
                      own_votes: Sequence[Vote], other_votes: dict[str, Sequence[Vote]], lengths: Sequence[int],
                      update: Any | None, zero_std_fraction: float) -> dict[str, float | None]:
    flat_r = [r for row in rewards.rewards for r in row]
    true_r = [[1.0 if (a is not None and is_equivalent(a, t)) else 0.0 for a in ans[:k]]
              for ans, t in zip(rollouts.answers, truth)]
    flat_true = [x for row in true_r for x in row]
    labels = rewards.pseudo_labels or [None] * len(truth)
    labelled = [(lb, t) for lb, t in zip(labels, truth) if lb is not None]
    out: dict[str, float | None] = {
        "reward/mean": _mean(flat_r),
        "reward/accuracy": _mean([float((r > 0.5) == (t > 0.5)) for r, t in zip(flat_r, flat_true)]),
        "reward/true_mean": _mean(flat_true),
        "label/accuracy": _mean([float(is_equivalent(lb, t)) for lb, t in labelled]),
        "label/coverage": len(labelled) / max(1, len(truth)),
        "vote/majority_ratio": _mean([v.ratio for v in own_votes]),
        "adv/zero_std_fraction": zero_std_fraction,
        "len/mean": _mean([float(n) for n in lengths]),
        "len/clipped_ratio": _mean([0.0 if f else 1.0 for row in rollouts.finished for f in row[:k]]),
    }
    if other_votes:
        per_peer = []
        for votes in other_votes.values():
            agree = [float(a.label is not None and a.label == b.label) for a, b in zip(own_votes, votes)]
            per_peer.append(_mean(agree) or 0.0)
        out["peer/agreement"] = _mean(per_peer)
    if update is not None:
        out.update({"loss": update.loss, "policy/entropy": update.entropy, "policy/kl": update.kl,
                    "policy/grad_norm": update.grad_norm, "policy/clip_fraction": update.clip_fraction})
        if getattr(update, "logp_gap_max", None) is not None:
            out.update({"engine/logp_gap_mean": update.logp_gap_mean, "engine/logp_gap_max": update.logp_gap_max})
    for key, val in rewards.metrics.items():
        out[f"method/{key}"] = val
    return out
