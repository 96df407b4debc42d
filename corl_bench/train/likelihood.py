"""A peer's scoring forward: how likely one agent's policy finds replies another agent wrote (peer likelihood).

The replies arrive as text and are tokenized by the scoring agent's own tokenizer, so agents of different families
(different vocabularies) score each other's completions; each reply is scored as the answer to the scoring agent's
own request for the problem (its chat template and prompt format). The score of a reply is the mean log-probability
of its tokens at temperature 1 (the model's likelihood, not the rollout's sampling distribution), computed without
grad in ``memory.micro_batch`` rows at a time; an empty reply is scored as the scoring model's end-of-sequence token
alone (how likely it would have stopped at once).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from corl_bench.rollout import Completion, Prompt
from corl_bench.train import grpo
from corl_bench.train import memory as memops

__all__ = ["text_likelihood"]


def reply(tokenizer: Any, text: str) -> Completion:
    """``text`` as a completion in ``tokenizer``'s ids (no special tokens; an empty text: the EOS token alone)."""
    ids = tuple(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else ()
    if not ids:
        ids = (tokenizer.eos_token_id,)
    return Completion(token_ids=ids, logprobs=(), text=text, finished=True)


@torch.no_grad()
def text_likelihood(agent: Any, requests: Sequence[Prompt], texts: Sequence[str]) -> list[float]:
    """S floats: the mean log-probability of ``texts[s]`` (re-encoded by ``agent``'s tokenizer) as the reply to
    ``requests[s]`` under ``agent``'s policy (a :class:`corl_bench.train.agent.Agent`)."""
    if len(requests) != len(texts):
        raise ValueError(f"likelihood needs one request per text (got {len(requests)} and {len(texts)})")
    out: list[float] = []
    step = agent.mem.micro_batch or max(1, len(texts))
    model = agent.model
    was_training = model.training
    model.eval()
    try:
        with memops.autocast(agent.mem.autocast, model):
            for i in range(0, len(texts), step):
                replies = [reply(agent.tokenizer, t) for t in texts[i: i + step]]
                ids, att, cmask, vision = agent._batch(list(requests[i: i + step]), replies)
                logits = agent._token_logits(model, ids, att, vision).float()
                logp = grpo.logprobs_from_logits(logits, ids[:, 1:], 1.0)
                out += grpo.masked_seq_mean(logp, cmask[:, 1:]).tolist()
    finally:
        model.train(was_training)
    return out
