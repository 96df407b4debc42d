"""An explorer pool (DCRL, arXiv 2603.16223): rollouts of a copy of the policy that was first moved one optimiser
step *away* from the policy's own samples ("temporarily unlearned"), so it answers where the policy is less sure.

The copy is one of the agent's auxiliary models (declared by the method, ``AuxiliaryModel(generates=True,
rollouts=False)``: it has an engine but the trainer samples nothing from it). Each call (v0yager33/DualConsensus
``fsdp_workers.py::unlearn_actor`` and ``dp_actor.py::update_unlearn_policy``, one pass, then generation):

1. the copy is set to the current policy (merged weights under LoRA);
2. one AdamW step at ``lr`` on the mean over the samples' completion tokens of ``-log(1 - clamp(p, eps, 1 - eps))``,
   ``p`` the copy's probability of each sampled token at the rollout temperature (descending it lowers ``p``);
   micro-batched by ``memory.micro_batch`` with the gradient accumulated over the whole batch;
3. the copy's engine follows its weights and samples ``params.n`` completions of each request.

Deviation: the release steps the actor's own AdamW (its moments from training) and then restores the actor; here a
fresh AdamW steps the copy (its first step moves each weight by about ``lr`` in the sign of its gradient) and the
policy is never touched, so nothing needs restoring.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from corl_bench.rollout import Completion, Prompt, SamplingParams
from corl_bench.train import grpo
from corl_bench.train.likelihood import reply

__all__ = ["explore"]


def explore(agent: Any, name: str, unlearn: Sequence[tuple[Prompt, str]], requests: Sequence[Prompt],
            params: SamplingParams, lr: float, eps: float) -> list[list[Completion]]:
    """[P][params.n] completions of ``requests`` from ``agent``'s auxiliary model ``name`` after it was set to the
    policy and unlearned one step on the ``unlearn`` (request, completion text) pairs (each text re-encoded by the
    agent's tokenizer, as :mod:`corl_bench.train.likelihood` does)."""
    if name not in agent.auxiliary or name not in agent.engines:
        raise RuntimeError(f"agent {agent.name} has no generating auxiliary model {name!r} to explore with; the method "
                           "must declare AuxiliaryModel(name, generates=True, rollouts=False)")
    agent.update_auxiliary(name, 1.0)  # the copy is the current policy
    module = agent.auxiliary[name]
    weights = [p for p in module.parameters() if p.is_floating_point()]
    if unlearn and lr > 0:
        for p in weights:
            p.requires_grad_(True)
        optimizer = torch.optim.AdamW(weights, lr=lr, weight_decay=0.0)
        try:
            replies = [reply(agent.tokenizer, text) for _, text in unlearn]
            step = agent.mem.micro_batch or len(unlearn)
            total = sum(len(c.token_ids) for c in replies) or 1
            module.train()
            for i in range(0, len(unlearn), step):
                ids, att, cmask, vision = agent._batch([q for q, _ in unlearn[i: i + step]], replies[i: i + step])
                logp = grpo.logprobs_from_logits(agent._token_logits(module, ids, att, vision).float(), ids[:, 1:],
                                                 agent.temperature)
                p = logp.exp().clamp(eps, 1.0 - eps)
                loss = (-torch.log1p(-p) * cmask[:, 1:]).sum() / total
                loss.backward()
            optimizer.step()
        finally:
            module.eval()
            for p in weights:
                p.grad = None
                p.requires_grad_(False)
        agent.engines[name].sync_weights(module)
    return agent.engines[name].generate(requests, params)
