"""GRPO core: pure functions on torch tensors.

Conventions follow verl (``verl/trainer/ppo/core_algos.py``: group-normalised
outcome advantages, clipped surrogate with ``clip_ratio_low/high`` and dual clip
``clip_ratio_c``, ``low_var_kl``, ``agg_loss``) and TRL ``GRPOTrainer``
(``loss_type`` = ``bnpo`` / ``grpo`` / ``dr_grpo``). Papers: GRPO (Shao et al.
2024, DeepSeekMath), DAPO (Yu et al. 2025: clip-higher, token-level mean),
Dr. GRPO (Liu et al. 2025: no std scaling, constant length normaliser), k3
estimator (Schulman 2020, "Approximating KL Divergence").

Shape letters: P prompts, G samples per prompt, N = P*G sequences, T padded
completion length, V vocabulary size. Masks are (N, T), 1/True on completion
tokens that count in the loss, 0/False on padding.

One optimiser step per rollout batch (the paper's setting): the behaviour
log-probs are the current ones, ``old_logp == logp.detach()``, so the ratio is
exactly 1 and the clip is never active. Gradients still flow: the loss is built
from ``logp`` (with grad) and ``d(-A * ratio)/d logp = -A * ratio = -A``, i.e.
the plain policy-gradient (REINFORCE with group baseline) estimator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from corl_bench.config import resolve_loss_agg

__all__ = ["LossOutput", "aggregate", "aggregate_denominator", "aggregate_partial", "chunked_token_stats",
           "entropy_from_logits", "grpo_loss", "grpo_loss_partial", "kl_k3", "logprobs_from_logits", "masked_seq_mean",
           "policy_loss", "self_certainty_from_logits", "token_advantages", "token_stats", "truncated_is_weight",
           "zero_std_fraction"]

_LOG_RATIO_CLAMP = 20.0  # verl clamps log-ratios to [-20, 20] before exp
_K3_CLAMP = 10.0  # verl low_var_kl clamps the estimate to [-10, 10]


def zero_std_fraction(rewards: Tensor, tol: float = 0.0) -> float:
    """Fraction of groups whose rewards are all equal (zero advantage, no signal).

    rewards: (P, G) — a row counts when ``max - min <= tol``. P == 0 gives 0.0.
    (DAPO's dynamic sampling filters exactly these groups.)
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be (P, G), got shape {tuple(rewards.shape)}")
    if rewards.shape[0] == 0:
        return 0.0
    if rewards.shape[1] == 0:
        return 1.0
    spread = rewards.amax(dim=1) - rewards.amin(dim=1)
    return float((spread <= tol).float().mean().item())


def token_advantages(adv: Tensor, mask: Tensor) -> Tensor:
    """Broadcast sequence advantages to tokens (outcome reward: same A on every token).

    adv: (N,) float; mask: (N, T) 0/1 or bool. Returns (N, T) = adv[:, None] * mask.
    """
    if adv.dim() != 1 or mask.dim() != 2 or adv.shape[0] != mask.shape[0]:
        raise ValueError(f"adv (N,) and mask (N, T) expected, got {tuple(adv.shape)}, {tuple(mask.shape)}")
    return adv.unsqueeze(-1) * mask.to(adv.dtype if adv.is_floating_point() else torch.float32)


def _check_nt(name: str, t: Tensor, ref: Tensor) -> None:
    if t.shape != ref.shape:
        raise ValueError(f"{name} must have shape {tuple(ref.shape)}, got {tuple(t.shape)}")


def policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
) -> tuple[Tensor, Tensor]:
    """Per-token clipped surrogate (PPO; verl ``compute_policy_loss``, DAPO clip-higher).

    logp, old_logp: (N, T) float log-probs of the sampled tokens (logp with grad).
    advantages: (N,) (broadcast over T) or (N, T). mask: (N, T) 0/1 or bool.

    ratio = exp(clamp(logp - old_logp, -20, 20));
    loss_t = max(-A*ratio, -A*clip(ratio, 1 - clip_low, 1 + clip_high)).
    Dual clip (verl ``clip_ratio_c``, typically 3; must be > 1): for A < 0,
    loss_t = min(loss_t, -A*dual_clip).
    Returns (loss_tok, clipped), both (N, T): loss_tok is 0 outside the mask;
    clipped (bool) is True on masked tokens where a clip changed the loss
    (the clipped branch won the max, or the dual clip bound it).
    Gradient where no clip acts: d loss_t / d logp = -A * ratio.
    """
    if logp.dim() != 2:
        raise ValueError(f"logp must be (N, T), got {tuple(logp.shape)}")
    _check_nt("old_logp", old_logp, logp)
    _check_nt("mask", mask, logp)
    if advantages.dim() == 1 and advantages.shape[0] == logp.shape[0]:
        adv = advantages.unsqueeze(-1)
    elif advantages.shape == logp.shape:
        adv = advantages
    else:
        raise ValueError(
            f"advantages must be (N,) or (N, T) for logp {tuple(logp.shape)}, got {tuple(advantages.shape)}"
        )
    if not 0.0 <= clip_low < 1.0 or clip_high < 0.0:
        raise ValueError(f"need 0 <= clip_low < 1 and clip_high >= 0, got {clip_low}, {clip_high}")
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
    adv = adv.detach().to(logp.dtype)
    m = mask.bool()
    # zero the log-ratio on padding so -inf/NaN there cannot leak into values or grads
    log_ratio = torch.where(m, logp - old_logp.detach(), torch.zeros_like(logp))
    ratio = torch.exp(log_ratio.clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP))
    pg1 = -adv * ratio
    pg2 = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    clipped = pg2 > pg1
    loss = torch.where(clipped, pg2, pg1)
    if dual_clip is not None:
        bound = -adv * dual_clip
        dual = (adv < 0) & (bound < loss)
        loss = torch.where(dual, bound.expand_as(loss), loss)
        clipped = clipped | dual
    loss = torch.where(m, loss, torch.zeros_like(loss))
    return loss, clipped & m


def truncated_is_weight(logp: Tensor, behaviour_logp: Tensor, mask: Tensor, cap: float) -> Tensor:
    """Per-token truncated importance weight min(exp(logp - behaviour_logp), cap), detached; 1 outside ``mask``.

    logp: (N, T) the trainer's log-probs of the sampled tokens; behaviour_logp: (N, T) the rollout engine's
    (TRL ``vllm_importance_sampling_correction`` with ``vllm_importance_sampling_cap``, truncated IS of Yao et al.
    2025). Returns (N, T)."""
    _check_nt("behaviour_logp", behaviour_logp, logp)
    m = mask.bool()
    log_ratio = torch.where(m, logp.detach() - behaviour_logp, torch.zeros_like(logp))
    return torch.exp(log_ratio.clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)).clamp(max=cap).detach()


def kl_k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Schulman k3 estimator of KL(pi || ref) per token (verl ``low_var_kl``).

    logp, ref_logp: (N, T) log-probs of the sampled tokens. Returns (N, T):
    with d = clamp(ref - logp, -20, 20): exp(d) - d - 1, clamped to [-10, 10].
    Non-negative, 0 where logp == ref. Gradients flow to logp.
    """
    _check_nt("ref_logp", ref_logp, logp)
    d = (ref_logp.detach() - logp).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    return (torch.exp(d) - d - 1.0).clamp(-_K3_CLAMP, _K3_CLAMP)


def aggregate(values: Tensor, mask: Tensor, mode: str, max_len: int | None = None) -> Tensor:
    """Reduce per-token values to a scalar (verl ``agg_loss`` / TRL ``loss_type``).

    values: (N, T) float; mask: (N, T) 0/1 or bool; mode: canonical name or alias.
    - token-mean (TRL bnpo, verl default, DAPO): sum(v*m) / sum(m).
    - seq-mean-token-mean (TRL grpo, original GRPO): mean over sequences with at
      least one masked token of sum_t(v*m) / sum_t(m).
    - seq-mean-token-sum-norm (Dr. GRPO; TRL dr_grpo): sum(v*m) / (N * L) with
      L = max_len if given else T. verl/TRL divide by a constant
      (max_completion_length); pass it as max_len so the scale does not depend
      on how much a batch was padded.
    Values outside the mask are ignored (even NaN). An empty mask gives 0 (with
    a grad_fn when values requires grad).
    """
    mode = resolve_loss_agg(mode)
    _check_nt("mask", mask, values)
    if values.dim() != 2:
        raise ValueError(f"values must be (N, T), got {tuple(values.shape)}")
    m = mask.bool()
    v = torch.where(m, values, torch.zeros_like(values))
    mf = m.to(values.dtype)
    if mode == "token-mean":
        return v.sum() / mf.sum().clamp(min=1.0)
    if mode == "seq-mean-token-mean":
        counts = mf.sum(dim=-1)
        seq_means = v.sum(dim=-1) / counts.clamp(min=1.0)
        has_tok = (counts > 0).to(values.dtype)
        return (seq_means * has_tok).sum() / has_tok.sum().clamp(min=1.0)
    L = values.shape[-1] if max_len is None else max_len
    if L <= 0:
        raise ValueError(f"max_len must be > 0, got {max_len}")
    return v.sum() / (max(values.shape[0], 1) * L)


def _scaled_logits(logits: Tensor, temperature: float) -> Tensor:
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    z = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    return z / temperature if temperature != 1.0 else z


def entropy_from_logits(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """Entropy of softmax(logits / temperature) per position (verl ``entropy_from_logits``).

    logits: (N, T, V) (any leading dims). Returns (N, T):
    H = logsumexp(z) - sum_v softmax(z)_v * z_v, z = logits / temperature.
    Half/bfloat16 inputs are computed and returned in float32.
    """
    z = _scaled_logits(logits, temperature)
    p = torch.softmax(z, dim=-1)
    return torch.logsumexp(z, dim=-1) - (p * z).sum(dim=-1)


def self_certainty_from_logits(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """Self-certainty KL(U || softmax(logits / temperature)) per position (Intuitor, arXiv 2505.19590).

    logits: (N, T, V). Returns (N, T): logsumexp(z) - mean_v(z) - log V, z = logits / temperature; >= 0, and 0
    exactly for the uniform distribution. (Intuitor's ``self_certainty_from_logits`` omits the constant -log V,
    which group normalisation removes anyway.)
    """
    z = _scaled_logits(logits, temperature)
    return torch.logsumexp(z, dim=-1) - z.mean(dim=-1) - math.log(z.shape[-1])


def masked_seq_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Per-sequence mean over masked positions. values/mask: (N, T) -> (N,); 0 for an empty row."""
    m = mask.to(values.dtype)
    return (values * m).sum(-1) / m.sum(-1).clamp(min=1.0)


def logprobs_from_logits(logits: Tensor, tokens: Tensor, temperature: float = 1.0) -> Tensor:
    """Log-probs of ``tokens`` under softmax(logits / temperature) (verl/TRL selective log-softmax).

    logits: (N, T, V) float; tokens: (N, T) int64 ids. Returns (N, T).
    Use the sampling temperature so logp matches the behaviour policy.
    Half/bfloat16 inputs are computed and returned in float32.
    """
    if tokens.shape != logits.shape[:-1]:
        raise ValueError(f"tokens must have shape {tuple(logits.shape[:-1])}, got {tuple(tokens.shape)}")
    z = _scaled_logits(logits, temperature)
    return torch.log_softmax(z, dim=-1).gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)


def token_stats(logits: Tensor, tokens: Tensor, temperature: float = 1.0) -> tuple[Tensor, Tensor, Tensor]:
    """Log-probs of ``tokens``, entropy and self-certainty from ONE log-softmax (the fast path of the training pass).

    logits: (N, T, V); tokens: (N, T). Returns (logp, entropy, certainty), each (N, T): logp with grad as
    :func:`logprobs_from_logits`; entropy = -sum_v p_v log p_v and certainty = -mean_v log p_v - log V, detached —
    the same quantities as :func:`entropy_from_logits` and :func:`self_certainty_from_logits` (equal within float
    rounding), without their softmax and two logsumexp passes over the (N, T, V) logits.
    """
    if tokens.shape != logits.shape[:-1]:
        raise ValueError(f"tokens must have shape {tuple(logits.shape[:-1])}, got {tuple(tokens.shape)}")
    ls = torch.log_softmax(_scaled_logits(logits, temperature), dim=-1)
    logp = ls.gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        d = ls.detach()
        entropy = -(d.exp() * d).sum(-1)
        certainty = -d.mean(-1) - math.log(d.shape[-1])
    return logp, entropy, certainty


@dataclass(frozen=True)
class LossOutput:
    """Result of ``grpo_loss``; all fields are scalar tensors."""

    loss: Tensor  # differentiable total loss
    pg_loss: Tensor  # detached policy-gradient part, aggregated with the same mode
    kl: Tensor  # detached token-mean k3 over masked tokens (0 if no reference)
    clip_fraction: Tensor  # detached fraction of masked tokens where a clip was active


def grpo_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    loss_agg: str = "token-mean",
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    kl_coef: float = 0.0,
    ref_logp: Tensor | None = None,
    max_len: int | None = None,
    dual_clip: float | None = None,
    is_weight: Tensor | None = None,
) -> LossOutput:
    """Full GRPO loss (TRL ``GRPOTrainer.compute_loss`` structure, verl conventions): :func:`grpo_loss_partial`
    with the whole batch as its one micro-batch.

    logp, old_logp, mask: (N, T); advantages: (N,) or (N, T); ref_logp: (N, T) or None.
    Per token: pg (``policy_loss``) + kl_coef * k3 (``kl_k3``) when kl_coef > 0,
    added before aggregation as TRL does; then ``aggregate`` with ``loss_agg``
    (aliases allowed) and ``max_len``. kl_coef > 0 without ref_logp raises
    ValueError. ``kl`` is reported whenever ref_logp is given, even at kl_coef 0. ``is_weight`` (N, T), detached
    (:func:`truncated_is_weight`): multiplies each token's policy-gradient term.
    """
    if logp.dim() != 2:
        raise ValueError(f"logp must be (N, T), got {tuple(logp.shape)}")
    _check_nt("mask", mask, logp)
    counts = mask.bool().sum(dim=-1)
    width = logp.shape[1]
    return grpo_loss_partial(
        logp, old_logp, advantages, mask,
        denominator=aggregate_denominator(counts, loss_agg, width, max_len),
        token_denominator=aggregate_denominator(counts, "token-mean", width),
        loss_agg=loss_agg, clip_low=clip_low, clip_high=clip_high, kl_coef=kl_coef, ref_logp=ref_logp,
        dual_clip=dual_clip, is_weight=is_weight,
    )


# ------------------------------------------------------------------------------------------- micro-batches
# Gradient accumulation: the batch of N sequences is split into micro-batches; each micro-batch's loss *share* is
# built and back-propagated on its own, then one optimiser step follows. The shares sum to the full-batch loss
# (and their gradients to its gradient) because every aggregation mode is a sum over sequences divided by a
# batch-wide constant, computed once from the whole batch's token counts by ``aggregate_denominator``.


def aggregate_denominator(counts: Tensor, mode: str, width: int, max_len: int | None = None) -> float:
    """The batch-wide constant ``aggregate`` divides by, from the whole batch's token counts.

    counts: (N,) masked (completion) tokens of every sequence of the whole batch; width: T, the padded length of
    the whole batch (only used by seq-mean-token-sum-norm without ``max_len``); mode: canonical name or alias.
    - token-mean: max(sum(counts), 1)            (all tokens of the batch)
    - seq-mean-token-mean: max(#(counts > 0), 1)  (sequences with at least one token)
    - seq-mean-token-sum-norm: N * L with L = max_len if given else width
    Returns a Python float (no grad).
    """
    mode = resolve_loss_agg(mode)
    if counts.dim() != 1:
        raise ValueError(f"counts must be (N,), got {tuple(counts.shape)}")
    if mode == "token-mean":
        return max(float(counts.sum()), 1.0)
    if mode == "seq-mean-token-mean":
        return max(float((counts > 0).sum()), 1.0)
    L = width if max_len is None else max_len
    if L <= 0:
        raise ValueError(f"max_len must be > 0, got {max_len}")
    return float(max(counts.shape[0], 1) * L)


def aggregate_partial(values: Tensor, mask: Tensor, mode: str, denominator: float) -> Tensor:
    """One micro-batch's share of ``aggregate`` over the whole batch.

    values: (n, t) float, one micro-batch (n sequences, padded to its own t); mask: (n, t) 0/1 or bool;
    denominator: ``aggregate_denominator`` of the whole batch. Returns a scalar:
    - token-mean, seq-mean-token-sum-norm: sum(v*m) / denominator
    - seq-mean-token-mean: sum_i [sum_t(v*m)_i / max(sum_t m_i, 1)] / denominator
    Summed over the micro-batches of a batch this equals ``aggregate`` of the whole batch (up to float summation
    order); so do the gradients. Values outside the mask are ignored (even NaN).
    """
    mode = resolve_loss_agg(mode)
    _check_nt("mask", mask, values)
    if values.dim() != 2:
        raise ValueError(f"values must be (n, t), got {tuple(values.shape)}")
    if denominator <= 0:
        raise ValueError(f"denominator must be > 0, got {denominator}")
    m = mask.bool()
    v = torch.where(m, values, torch.zeros_like(values))
    if mode == "seq-mean-token-mean":
        counts = m.to(values.dtype).sum(dim=-1)
        return (v.sum(dim=-1) / counts.clamp(min=1.0)).sum() / denominator
    return v.sum() / denominator


def grpo_loss_partial(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    denominator: float,
    token_denominator: float,
    loss_agg: str = "token-mean",
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    kl_coef: float = 0.0,
    ref_logp: Tensor | None = None,
    dual_clip: float | None = None,
    is_weight: Tensor | None = None,
) -> LossOutput:
    """One micro-batch's share of ``grpo_loss`` over the whole batch (gradient accumulation).

    logp, old_logp, mask, ref_logp: (n, t) of the micro-batch; advantages: (n,) or (n, t).
    denominator: ``aggregate_denominator(counts, loss_agg, T, max_len)`` of the whole batch; token_denominator:
    ``aggregate_denominator(counts, "token-mean", T)`` (the token-mean ``kl`` and ``clip_fraction`` use it).
    Every field of the result is this micro-batch's share: summed over the micro-batches of a batch, each equals
    the field ``grpo_loss`` gives for the whole batch (loss with grad; the others detached).
    """
    mode = resolve_loss_agg(loss_agg)
    if kl_coef < 0:
        raise ValueError(f"kl_coef must be >= 0, got {kl_coef}")
    if kl_coef > 0 and ref_logp is None:
        raise ValueError("kl_coef > 0 needs ref_logp (reference-model log-probs)")
    pg_tok, clipped = policy_loss(logp, old_logp, advantages, mask, clip_low, clip_high, dual_clip)
    if is_weight is not None:
        pg_tok = pg_tok * is_weight.detach()
    m = mask.bool()
    per_tok = pg_tok
    kl = torch.zeros((), dtype=logp.dtype, device=logp.device)
    if ref_logp is not None:
        k3 = torch.where(m, kl_k3(logp, ref_logp), torch.zeros_like(logp))
        kl = aggregate_partial(k3.detach(), m, "token-mean", token_denominator)
        if kl_coef > 0:
            per_tok = pg_tok + kl_coef * k3
    loss = aggregate_partial(per_tok, m, mode, denominator)
    pg_loss = aggregate_partial(pg_tok.detach(), m, mode, denominator)
    clip_fraction = aggregate_partial(clipped.to(logp.dtype), m, "token-mean", token_denominator)
    return LossOutput(loss=loss, pg_loss=pg_loss, kl=kl, clip_fraction=clip_fraction)


# ------------------------------------------------------------------------------------------- chunked logits
def chunked_token_stats(
    hidden: Tensor,
    head: Callable[[Tensor], Tensor],
    tokens: Tensor,
    temperature: float = 1.0,
    chunk: int = 1024,
    *,
    stats: bool = True,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """Log-probs (and entropy, self-certainty) of M positions without their (M, V) logits existing at once.

    hidden: (M, H) final hidden states of M positions (any dtype; with grad or not); head: (m, H) -> (m, V) raw
    logits (the LM head with the model's logit scaling / soft-capping); tokens: (M,) int64 targets.
    Returns (logp, entropy, self_certainty), each (M,) float32: logp = ``logprobs_from_logits`` (with grad when
    hidden or head's parameters require it); entropy and self-certainty (``entropy_from_logits``,
    ``self_certainty_from_logits``) detached, or None when ``stats`` is False.

    The head is applied to ``chunk`` rows at a time. With grad enabled each chunk runs under
    ``torch.utils.checkpoint`` (non-reentrant), so only the chunk's (chunk, H) input is kept for backward and its
    (chunk, V) logits are recomputed there, one chunk at a time: peak memory is O(chunk * V), not O(M * V).
    """
    if hidden.dim() != 2 or tokens.dim() != 1 or hidden.shape[0] != tokens.shape[0]:
        raise ValueError(f"hidden (M, H) and tokens (M,) expected, got {tuple(hidden.shape)}, {tuple(tokens.shape)}")
    if chunk <= 0:
        raise ValueError(f"chunk must be > 0, got {chunk}")

    def one(h: Tensor, t: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        logits = head(h)
        lp = logprobs_from_logits(logits, t, temperature)
        if not stats:  # empty placeholders keep the checkpointed function's outputs uniform
            return lp, lp.new_zeros(0), lp.new_zeros(0)
        with torch.no_grad():  # computed after lp: a checkpoint recompute stops before reaching these
            d = logits.detach()
            return lp, entropy_from_logits(d, temperature), self_certainty_from_logits(d, temperature)

    use_ckpt = torch.is_grad_enabled()
    parts: list[tuple[Tensor, Tensor, Tensor]] = []
    for i in range(0, hidden.shape[0], chunk):
        h, t = hidden[i: i + chunk], tokens[i: i + chunk]
        if use_ckpt:
            from torch.utils.checkpoint import checkpoint

            parts.append(checkpoint(one, h, t, use_reentrant=False))
        else:
            parts.append(one(h, t))
    if not parts:
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty, (empty if stats else None), (empty if stats else None)
    logp = torch.cat([p[0] for p in parts])
    if not stats:
        return logp, None, None
    return logp, torch.cat([p[1] for p in parts]), torch.cat([p[2] for p in parts])
