"""The ``hf`` backend: batched ``transformers`` generate with KV cache and left padding.

Sampling is seeded per call inside ``torch.random.fork_rng`` so an agent's seed never disturbs the global RNG or
another agent's stream. Logprobs come from the raw logits of each generation step, temperature-scaled, i.e. the
distribution the token was sampled from (before top-p truncation, as verl and TRL report them).
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

import torch

from corl_bench.rollout.base import Completion, InProcessEngine, Prompt, SamplingParams

log = logging.getLogger(__name__)


class HFEngine(InProcessEngine):
    """Rollouts from an in-process ``transformers`` causal LM (CPU or one GPU)."""

    def __init__(self, model: Any, tokenizer: Any, *, max_batch: int = 512) -> None:
        if tokenizer.padding_side != "left":
            raise ValueError("the hf rollout engine needs a left-padding tokenizer (padding_side='left')")
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch = max_batch

    @torch.no_grad()
    def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        flat = [p for p in prompts for _ in range(params.n)]
        out: list[Completion] = []
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(params.seed)
                for i in range(0, len(flat), self.max_batch):
                    out.extend(self._generate_batch(flat[i: i + self.max_batch], params))
        finally:
            self.model.train(was_training)
        return [out[i * params.n: (i + 1) * params.n] for i in range(len(prompts))]

    def _generate_batch(self, prompts: list[Prompt], params: SamplingParams) -> list[Completion]:
        tok = self.tokenizer
        enc = self.encode(prompts, next(self.model.parameters()).device)
        kwargs: dict[str, Any] = dict(max_new_tokens=params.max_new_tokens, pad_token_id=tok.pad_token_id,
                                      eos_token_id=tok.eos_token_id, return_dict_in_generate=True,
                                      output_logits=params.logprobs)
        if params.stop:
            kwargs.update(stop_strings=list(params.stop), tokenizer=tok)
        if params.greedy:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            kwargs.update(do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=0)
        res = self.model.generate(**enc, **kwargs)
        gen = res.sequences[:, enc["input_ids"].shape[1]:]
        lp = None
        if params.logprobs:
            logits = torch.stack(res.logits, dim=1).float()  # (B, T, V)
            temp = 1.0 if params.greedy else params.temperature
            lp = torch.log_softmax(logits / temp, dim=-1).gather(-1, gen.unsqueeze(-1)).squeeze(-1)
        eos = tok.eos_token_id
        comps = []
        for b in range(gen.shape[0]):
            ids = gen[b].tolist()
            finished = eos in ids
            n = ids.index(eos) + 1 if finished else len(ids)
            ids = ids[:n]
            text = tok.decode([t for t in ids if t != eos], skip_special_tokens=True)
            cut = min((i for i in (text.find(s) for s in params.stop) if i >= 0), default=-1)
            if cut >= 0:
                text, finished = text[:cut], True
            lps = tuple(lp[b, :n].tolist()) if lp is not None else ()
            comps.append(Completion(tuple(ids), lps, text, finished))
        return comps
