"""An agent: one model with its own tokenizer, optimizer, optional reference and sampling seed.

The boundary is deliberately narrow — generate, forward/step (update), save — so an agent can later live in its own process (or a
Ray actor with its own GPUs) without any method changing. Agents never share parameters or gradients; Co-RL agents
exchange extracted answers only, and that exchange happens in the method, above this layer.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from corl_bench.train import grpo
from corl_bench.config import AgentSpec, GRPOConfig
from corl_bench.rollout import Completion, SamplingParams, make_engine

log = logging.getLogger(__name__)


class NumericalError(RuntimeError):
    """A non-finite value in training; names the agent, the step and the quantity (rewards, advantages, loss ...)."""

    def __init__(self, quantity: str, agent: str, step: int | None = None, detail: str = "") -> None:
        self.quantity, self.agent, self.step, self.detail = quantity, agent, step, detail
        where = f"agent {agent}" + (f", step {step}" if step is not None else "")
        super().__init__(f"non-finite {quantity} ({where}){': ' + detail if detail else ''}; nothing was updated, "
                         "the last good checkpoint is intact — lower grpo.lr or check the method's rewards, then "
                         "resume with --resume")


def check_finite(values: Any, quantity: str, agent: str, step: int | None = None) -> None:
    t = torch.as_tensor(values)
    if t.numel() and not bool(torch.isfinite(t).all()):
        bad = int((~torch.isfinite(t)).sum())
        raise NumericalError(quantity, agent, step, f"{bad} of {t.numel()} values")


@dataclass(frozen=True)
class UpdateStats:
    loss: float
    pg_loss: float
    kl: float
    clip_fraction: float
    grad_norm: float
    entropy: float  # mean token entropy of the policy on its own completions (at the rollout temperature)
    n_tokens: int


@dataclass
class PolicyForward:
    """What one training-side forward pass yields (N sequences, T positions)."""

    logp: torch.Tensor  # (N, T) log-probs of the completion tokens, with grad
    mask: torch.Tensor  # (N, T) 1 on completion tokens
    entropy: torch.Tensor  # (N,) mean token entropy per sequence at the rollout temperature (detached)
    self_certainty: torch.Tensor  # (N,) mean token KL(U || p) per sequence (detached)
    ref_logp: torch.Tensor | None = None  # (N, T) under the frozen reference, when grpo.kl_coef > 0


def concat_forwards(a: PolicyForward, b: PolicyForward) -> PolicyForward:
    """Stack two forward passes of one agent along the batch: (N1, T1) + (N2, T2) -> (N1+N2, max T), padding masked."""
    width = max(a.logp.shape[1], b.logp.shape[1])

    def pad(x: torch.Tensor | None) -> torch.Tensor | None:
        return None if x is None else torch.nn.functional.pad(x, (0, width - x.shape[1]))

    ref = None
    if a.ref_logp is not None and b.ref_logp is not None:
        ref = torch.cat([pad(a.ref_logp), pad(b.ref_logp)])
    return PolicyForward(logp=torch.cat([pad(a.logp), pad(b.logp)]), mask=torch.cat([pad(a.mask), pad(b.mask)]),
                         entropy=torch.cat([a.entropy, b.entropy]),
                         self_certainty=torch.cat([a.self_certainty, b.self_certainty]), ref_logp=ref)


class Agent:
    def __init__(self, spec: AgentSpec, model: Any, tokenizer: Any, grpo_cfg: GRPOConfig, *,
                 backend: str = "hf", temperature: float = 1.0, teacher: bool = False) -> None:
        self.spec = spec
        self.name = spec.name
        self.model = model
        self.tokenizer = tokenizer
        self.cfg = grpo_cfg
        self.temperature = temperature
        self.engine = make_engine(backend, model, tokenizer)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=grpo_cfg.lr, betas=grpo_cfg.betas,
                                           weight_decay=grpo_cfg.weight_decay)
        self.reference = None
        self.teacher_engine = None
        if grpo_cfg.kl_coef > 0 or teacher:  # copy of the initial policy: KL anchor (and EMA teacher)
            self.reference = copy.deepcopy(model).eval()
            for p in self.reference.parameters():
                p.requires_grad_(False)
        if teacher:  # a slowly updated teacher that generates its own rollouts and doubles as the KL anchor
            self.teacher_engine = make_engine(backend, self.reference, tokenizer)

    # ------------------------------------------------------------------ rollouts
    def generate(self, prompts: Sequence[str], params: SamplingParams, *, teacher: bool = False
                 ) -> list[list[Completion]]:
        """Rollouts from the policy, or from the EMA teacher (``teacher=True``, agents built with a teacher)."""
        if teacher:
            if self.teacher_engine is None:
                raise RuntimeError(f"agent {self.name} has no teacher; build it with teacher=True")
            return self.teacher_engine.generate(prompts, params)
        return self.engine.generate(prompts, params)

    @torch.no_grad()
    def ema_update(self, alpha: float) -> None:
        """teacher <- alpha * policy + (1 - alpha) * teacher (Co-rewarding-II's sliding average)."""
        if self.reference is None:
            raise RuntimeError(f"agent {self.name} has no teacher/reference to update")
        for t, p in zip(self.reference.parameters(), self.model.parameters()):
            t.mul_(1.0 - alpha).add_(p.detach(), alpha=alpha)

    # ------------------------------------------------------------------ update
    def _batch(self, prompts: Sequence[str], completions: Sequence[Completion]) -> tuple[torch.Tensor, ...]:
        """Right-padded (prompt + completion) ids, attention mask, completion mask and targets, all (N, L)."""
        tok = self.tokenizer
        p_ids = tok(list(prompts), add_special_tokens=True)["input_ids"]
        rows = [(p, list(c.token_ids)) for p, c in zip(p_ids, completions)]
        width = max(len(p) + len(c) for p, c in rows)
        n = len(rows)
        ids = torch.full((n, width), tok.pad_token_id, dtype=torch.long)
        att = torch.zeros((n, width), dtype=torch.long)
        cmask = torch.zeros((n, width), dtype=torch.float32)
        for r, (p, c) in enumerate(rows):
            seq = p + c
            ids[r, : len(seq)] = torch.tensor(seq, dtype=torch.long)
            att[r, : len(seq)] = 1
            cmask[r, len(p): len(seq)] = 1.0
        return ids, att, cmask

    def _token_logits(self, model: Any, ids: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
        """Logits predicting token t+1 at position t, aligned to targets ids[:, 1:]: (N, L-1, V)."""
        return model(input_ids=ids, attention_mask=att).logits[:, :-1, :]

    def forward(self, prompts: Sequence[str], completions: Sequence[Completion]) -> PolicyForward:
        """The single training-side forward pass over N = len(completions) sequences.

        It yields the log-probs the loss is built from (with grad) and, from the same full-vocabulary logits at the
        rollout temperature, each sequence's mean token entropy (RENT) and self-certainty (Intuitor) — so
        intrinsic rewards need no second pass over the model.
        """
        ids, att, cmask = self._batch(prompts, completions)
        targets, mask = ids[:, 1:], cmask[:, 1:]
        self.model.train()
        logits = self._token_logits(self.model, ids, att)
        logp = grpo.logprobs_from_logits(logits, targets, self.temperature)
        with torch.no_grad():
            detached = logits.detach()
            entropy = grpo.masked_seq_mean(grpo.entropy_from_logits(detached, self.temperature), mask)
            certainty = grpo.masked_seq_mean(grpo.self_certainty_from_logits(detached, self.temperature), mask)
        ref_logp = None
        if self.reference is not None:
            with torch.no_grad():
                ref_logp = grpo.logprobs_from_logits(self._token_logits(self.reference, ids, att), targets,
                                                     self.temperature)
        return PolicyForward(logp=logp, mask=mask, entropy=entropy, self_certainty=certainty, ref_logp=ref_logp)

    def step(self, fwd: PolicyForward, advantages: torch.Tensor, max_len: int | None = None) -> UpdateStats:
        """One GRPO policy step from a :meth:`forward` pass; ``advantages`` is (N,).

        One optimiser step per rollout batch (on-policy, the paper's setting): old log-probs are the current
        ones, so the ratio is 1 and the clip is inactive; the gradient is the group-baselined policy gradient.
        """
        mask = fwd.mask
        out = grpo.grpo_loss(fwd.logp, fwd.logp.detach(), advantages, mask, loss_agg=self.cfg.loss_agg,
                             clip_low=self.cfg.clip_low, clip_high=self.cfg.clip_high, kl_coef=self.cfg.kl_coef,
                             ref_logp=fwd.ref_logp, max_len=max_len)
        check_finite(out.loss.detach(), "loss", self.name)
        self.optimizer.zero_grad(set_to_none=True)
        out.loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.max_grad_norm)
        if not bool(torch.isfinite(grad_norm)):
            self.optimizer.zero_grad(set_to_none=True)
            raise NumericalError("gradients", self.name, detail=f"grad norm {float(grad_norm)}")
        self.optimizer.step()
        self.model.eval()
        n_tok = mask.sum(-1)
        mean_entropy = float((fwd.entropy * n_tok).sum() / n_tok.sum().clamp(min=1))
        return UpdateStats(loss=float(out.loss.detach()), pg_loss=float(out.pg_loss), kl=float(out.kl),
                           clip_fraction=float(out.clip_fraction), grad_norm=float(grad_norm),
                           entropy=mean_entropy, n_tokens=int(mask.sum()))

    def update(self, prompts: Sequence[str], completions: Sequence[Completion], advantages: torch.Tensor,
               max_len: int | None = None) -> UpdateStats:
        """forward + step: one GRPO update on N sequences with advantages (N,)."""
        return self.step(self.forward(prompts, completions), advantages, max_len=max_len)

    # ------------------------------------------------------------------ persistence
    def save(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
