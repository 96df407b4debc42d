"""Shared-prefix training forward (``memory.shared_prefix``): a prompt's K samples share one pass over the prompt.

A GRPO batch holds every prompt K times. The plain training pass runs each of the N = P x K rows over prompt +
completion; here the P distinct prompts run once (left-padded, ``use_cache=True``, with grad) and their key/value
cache is indexed out to the N rows (an index, so the gradient of every sample flows back into its prompt's shared
pass and is summed there, as it is in the plain pass), then the N completions run on top of it. The logits are
the same function of the weights as in the plain pass, so the loss and its gradient agree within float rounding
(tested); only prompt tokens are computed fewer times, and no logits are computed on prompt positions. With long
prompts and K = 8 (the paper's setting) the prompts are most of the tokens.

Shapes: G distinct prompts, N sequences, Lp the longest prompt, Lc the longest completion, V the vocabulary.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch import Tensor


@dataclass
class PrefixBatch:
    """A training batch in the shared-prefix layout."""

    prompt_ids: Tensor  # (G, Lp) the distinct prompts, left-padded
    prompt_att: Tensor  # (G, Lp)
    group: Tensor  # (N,) which prompt each sequence continues
    ids: Tensor  # (N, Lc) completion tokens, right-padded
    att: Tensor  # (N, Lc) 1 on completion tokens

    @property
    def mask(self) -> Tensor:
        """(N, Lc) float: the completion tokens the loss counts."""
        return self.att.float()

    @property
    def rows(self) -> int:
        return self.ids.shape[0]


def build(prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], pad_id: int, device: Any
          ) -> PrefixBatch:
    """Token ids of N (prompt, completion) pairs -> the shared layout; equal consecutive prompts form one group."""
    uniq: list[tuple[int, ...]] = []
    group: list[int] = []
    for p in prompts:
        key = tuple(p)
        if not uniq or uniq[-1] != key:
            uniq.append(key)
        group.append(len(uniq) - 1)
    lp = max(len(p) for p in uniq)
    lc = max(1, max(len(c) for c in completions))
    p_ids = torch.full((len(uniq), lp), pad_id, dtype=torch.long)
    p_att = torch.zeros((len(uniq), lp), dtype=torch.long)
    for g, p in enumerate(uniq):
        if p:
            p_ids[g, lp - len(p):] = torch.tensor(p, dtype=torch.long)
            p_att[g, lp - len(p):] = 1
    ids = torch.full((len(completions), lc), pad_id, dtype=torch.long)
    att = torch.zeros((len(completions), lc), dtype=torch.long)
    for r, c in enumerate(completions):
        if c:
            ids[r, : len(c)] = torch.tensor(list(c), dtype=torch.long)
            att[r, : len(c)] = 1
    return PrefixBatch(p_ids.to(device), p_att.to(device), torch.tensor(group, device=device), ids.to(device),
                       att.to(device))


def _cache_kw(model: Any) -> tuple[str, bool]:
    params = inspect.signature(model.forward).parameters
    return ("cache" if "cache" in params else "past_key_values"), "logits_to_keep" in params


def logits(model: Any, b: PrefixBatch) -> Tensor:
    """(N, Lc, V) logits aligned to ``b.ids``: entry [n, j] is the distribution that predicted ``b.ids[n, j]``.

    Two passes: the G prompts (only their last position's logits, which predict each completion's first token),
    then the N completions attending to their prompt's cached keys and values."""
    kw, last_only = _cache_kw(model)
    pos = (b.prompt_att.cumsum(-1) - 1).clamp(min=0)
    extra = {"logits_to_keep": 1} if last_only else {}
    out = model(input_ids=b.prompt_ids, attention_mask=b.prompt_att, position_ids=pos, use_cache=True, **extra)
    first = out.logits[:, -1:, :][b.group]  # (N, 1, V)
    if b.ids.shape[1] == 1:
        return first
    cache = getattr(out, kw)
    cache.batch_select_indices(b.group)  # (G, ...) -> (N, ...): an index, so gradients sum into the shared prompt
    start = b.prompt_att.sum(-1)[b.group]  # (N,) each prompt's length = the first completion position
    steps = torch.arange(b.ids.shape[1] - 1, device=b.ids.device)
    att = torch.cat([b.prompt_att[b.group], b.att[:, :-1]], dim=-1)
    rest = model(input_ids=b.ids[:, :-1], attention_mask=att, position_ids=start[:, None] + steps[None, :],
                 use_cache=True, **{kw: cache}).logits  # (N, Lc - 1, V)
    return torch.cat([first, rest], dim=1)
