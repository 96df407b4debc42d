"""Outcome advantage estimators: pure functions on torch tensors, shared by the GRPO core
(:mod:`corl_bench.train.grpo`) and the method contract (:mod:`corl_bench.method`, which calls
:func:`whitened_advantages` on behalf of methods that shape their own advantages). Moved out of ``train.grpo`` in
issue 23 so the method contract never imports training.

* :func:`group_advantages` - GRPO's group-relative advantages (verl ``compute_grpo_outcome_advantage``)
* :func:`whitened_advantages` - REINFORCE++ advantages whitened over all of an agent's samples, token-weighted

Shape letters: P prompts, G samples per prompt, N = P*G sequences.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["group_advantages", "whitened_advantages"]


def group_advantages(
    rewards: Tensor, scale_std: bool = True, eps: float = 1e-6, unbiased: bool = True
) -> Tensor:
    """Group-relative outcome advantages (verl ``compute_grpo_outcome_advantage``).

    rewards: (P, G) float — P prompts (groups), G samples per prompt.
    Returns advantages: (P, G), same dtype, no grad needed.

    ``(r - mean_g) / (std_g + eps)`` if ``scale_std`` else ``r - mean_g``
    (Dr. GRPO / TRL ``scale_rewards=False``). ``std_g`` is ``torch.std`` with
    Bessel's correction (``unbiased=True``, as verl and TRL); ``unbiased=False``
    gives the population std.
    G == 1: as verl, mean 0 and std 1, so the advantage is ``r / (1 + eps)``
    with ``scale_std`` and exactly ``r`` without.
    Groups whose rewards are all equal (G > 1) get exactly 0 (no float residue).
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be (P, G), got shape {tuple(rewards.shape)}")
    r = rewards if rewards.is_floating_point() else rewards.float()
    P, G = r.shape
    if G == 1:
        return r / (1.0 + eps) if scale_std else r.clone()
    mean = r.mean(dim=1, keepdim=True)
    adv = r - mean
    if scale_std:
        std = r.std(dim=1, keepdim=True, unbiased=unbiased)
        adv = adv / (std + eps)
    constant = (r.amax(dim=1, keepdim=True) == r.amin(dim=1, keepdim=True))
    return torch.where(constant, torch.zeros_like(adv), adv)


def whitened_advantages(rewards: Tensor, lengths: Tensor, eps: float = 1e-8) -> Tensor:
    """REINFORCE++ outcome advantages with global token-weighted whitening (OpenRLHF/MARTI ``reinforce``).

    rewards: (N,) one scalar per sequence, placed on its last token; lengths: (N,) response token counts.
    Returns advantages: (N,), one value per sequence (broadcast over its tokens).

    With gamma = 1 and no KL penalty in the reward, every token's return is the sequence reward, so the
    per-token advantages are ``(r_i - mu) / sqrt(var + eps)`` where ``mu`` and the (population) ``var`` run over
    all response tokens of the batch: sequences weigh by their length. No groups, so no per-prompt baseline.
    Sequences of length 0 carry no tokens and do not count. A batch of equal rewards gets exactly 0.
    """
    if rewards.dim() != 1 or lengths.shape != rewards.shape:
        raise ValueError(f"rewards and lengths must both be (N,), got {tuple(rewards.shape)} and {tuple(lengths.shape)}")
    r = rewards.float()
    w = lengths.float()
    total = w.sum()
    if total <= 0:
        return torch.zeros_like(r)
    mean = (r * w).sum() / total
    var = (((r - mean) ** 2) * w).sum() / total
    counted = r[w > 0]
    if counted.numel() == 0 or bool((counted == counted[0]).all()):
        return torch.zeros_like(r)
    return (r - mean) * torch.rsqrt(var.clamp(min=eps))
