"""Shared-prefix training forward (``memory.shared_prefix``): a prompt's K samples share one pass over the prompt.

A GRPO batch holds every prompt K times. The plain training pass runs each of the N = P x K rows over prompt +
completion; here the P distinct prompts run once (left-padded, ``use_cache=True``, with grad) and their key/value
cache is indexed out to the N rows (an index, so the gradient of every sample flows back into its prompt's shared
pass and is summed there, as it is in the plain pass), then the N completions run on top of it. The logits are
the same function of the weights as in the plain pass, so the loss and its gradient agree within float rounding
(tested); only prompt tokens are computed fewer times, and no logits are computed on prompt positions. With long
prompts and K = 8 (the paper's setting) the prompts are most of the tokens.

A vision-language batch shares the image too: two rows are one group only when their prompt ids *and* images are
equal (``keys``), the prompt pass carries the G prompts' image inputs (``PrefixBatch.vision``), and a model with
multimodal rotary positions (Qwen2-VL, Qwen2.5-VL: ``get_rope_index``) gets its (3, G, Lp) prompt positions from the
model, the completions continuing from each prompt's last position + 1 on every axis.

Shapes: G distinct prompts, N sequences, Lp the longest prompt, Lc the longest completion, V the vocabulary.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Hashable, Sequence

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
    vision: dict[str, Tensor] = field(default_factory=dict)  # the G prompts' image inputs ({} for text)
    first_rows: list[int] = field(default_factory=list)  # the first sequence of each group (its images are the group's)

    @property
    def mask(self) -> Tensor:
        """(N, Lc) float: the completion tokens the loss counts."""
        return self.att.float()

    @property
    def rows(self) -> int:
        return self.ids.shape[0]


def build(prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], pad_id: int, device: Any,
          keys: Sequence[Hashable] | None = None) -> PrefixBatch:
    """Token ids of N (prompt, completion) pairs -> the shared layout; equal consecutive prompts form one group
    (``keys``: what makes two prompts equal when the ids alone do not, e.g. their images)."""
    uniq: list[tuple[int, ...]] = []
    seen: list[Hashable] = []
    group: list[int] = []
    first: list[int] = []
    for r, p in enumerate(prompts):
        key = tuple(p) if keys is None else (tuple(p), keys[r])
        if not seen or seen[-1] != key:
            seen.append(key)
            uniq.append(tuple(p))
            first.append(r)
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
                       att.to(device), first_rows=first)


def _cache_kw(model: Any) -> tuple[str, bool]:
    params = inspect.signature(model.forward).parameters
    return ("cache" if "cache" in params else "past_key_values"), "logits_to_keep" in params


def logits(model: Any, b: PrefixBatch) -> Tensor:
    """(N, Lc, V) logits aligned to ``b.ids``: entry [n, j] is the distribution that predicted ``b.ids[n, j]``.

    Two passes: the G prompts (only their last position's logits, which predict each completion's first token),
    then the N completions attending to their prompt's cached keys and values."""
    kw, last_only = _cache_kw(model)
    pos = (b.prompt_att.cumsum(-1) - 1).clamp(min=0)
    rope = getattr(getattr(model, "model", None), "get_rope_index", None)
    if rope is not None and "image_grid_thw" in b.vision:  # multimodal rotary positions: (3, G, Lp)
        pos, _ = rope(b.prompt_ids, attention_mask=b.prompt_att,
                      **{k: v for k, v in b.vision.items() if k in ("image_grid_thw", "mm_token_type_ids")})
    extra = {"logits_to_keep": 1} if last_only else {}
    out = model(input_ids=b.prompt_ids, attention_mask=b.prompt_att, position_ids=pos, use_cache=True, **extra,
                **b.vision)
    first = out.logits[:, -1:, :][b.group]  # (N, 1, V)
    if b.ids.shape[1] == 1:
        return first
    cache = getattr(out, kw)
    cache.batch_select_indices(b.group)  # (G, ...) -> (N, ...): an index, so gradients sum into the shared prompt
    steps = torch.arange(b.ids.shape[1] - 1, device=b.ids.device)
    if pos.dim() == 3:  # each prompt's last position + 1 on every rotary axis: (3, N, Lc - 1)
        positions = pos[:, :, -1][:, b.group][..., None] + 1 + steps
    else:
        start = b.prompt_att.sum(-1)[b.group]  # (N,) each prompt's length = the first completion position
        positions = start[:, None] + steps[None, :]
    att = torch.cat([b.prompt_att[b.group], b.att[:, :-1]], dim=-1)
    rest = model(input_ids=b.ids[:, :-1], attention_mask=att, position_ids=positions,
                 use_cache=True, **{kw: cache}).logits  # (N, Lc - 1, V)
    return torch.cat([first, rest], dim=1)
