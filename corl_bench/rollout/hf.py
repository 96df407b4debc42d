"""The ``hf`` backend: batched ``transformers`` generate with KV cache and left padding.

Sampling is seeded per call inside ``torch.random.fork_rng`` so an agent's seed never disturbs the global RNG or
another agent's stream. Logprobs come from the raw logits of each generation step, temperature-scaled, i.e. the
distribution the token was sampled from (before top-p truncation, as verl and TRL report them). They are taken
step by step by a forward hook (:class:`_StepLogprobs`): only one step's (B, V) log-softmax is held at a time,
never the (B, T, V) stack of every step's logits that ``output_logits=True`` would keep (17 GB for 64 rollouts of
256 tokens over Gemma-3's 262,144-token vocabulary); the values are those of the stacked computation, bit for bit.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

import torch

from corl_bench.rollout.base import Completion, InProcessEngine, SamplingParams
from corl_bench.rollout.request import Prompt

log = logging.getLogger(__name__)


class HFEngine(InProcessEngine):
    """Rollouts from an in-process ``transformers`` causal LM or vision-language model (CPU or one GPU)."""

    supports_images = True

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
                                      eos_token_id=tok.eos_token_id, return_dict_in_generate=True)
        if params.stop:
            kwargs.update(stop_strings=list(params.stop), tokenizer=tok)
        codec = self.processor.codec
        if codec is not None:  # a VLM never samples its image-layout tokens (the raw log-probs are unchanged)
            kwargs.update(suppress_tokens=list(codec.layout_ids))
        if params.greedy:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            kwargs.update(do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=0)
        recorder = _StepLogprobs(1.0 if params.greedy else params.temperature) if params.logprobs else None
        handle = self.model.register_forward_hook(recorder, with_kwargs=True) if recorder is not None else None
        try:
            res = self.model.generate(**enc, **kwargs)
        finally:
            if handle is not None:
                handle.remove()
        gen = res.sequences[:, enc["input_ids"].shape[1]:]
        lp = recorder.finish(gen) if recorder is not None else None
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


class _StepLogprobs:
    """Forward hook on the model during ``generate``: the log-probs of the sampled tokens, one step at a time.

    Each forward call's last-position logits give ``log_softmax(logits.float() / T)`` (B, V), held until the next
    call, whose input ids are the tokens sampled from it; the chosen entries are gathered then and the (B, V)
    tensor dropped. :meth:`finish` gathers the last step from the generated ids and checks that the tokens seen by
    the hook are the generated ones (a ``generate`` that calls the model differently fails loudly, not silently).
    """

    def __init__(self, temperature: float) -> None:
        self.temperature = temperature
        self.pending: torch.Tensor | None = None  # (B, V) log-probs of the step whose token is not known yet
        self.chosen: list[torch.Tensor] = []  # (B,) per step
        self.tokens: list[torch.Tensor] = []  # (B,) the token ids the hook gathered with, per step

    def __call__(self, module: Any, args: tuple, kwargs: dict, output: Any) -> None:
        if self.pending is not None:
            ids = kwargs.get("input_ids", args[0] if args else None)
            nxt = ids[:, -1:]
            self.chosen.append(self.pending.gather(-1, nxt).squeeze(-1))
            self.tokens.append(nxt.squeeze(-1))
        logits = output.logits[:, -1].float()  # what generate samples from (its next_token_logits)
        self.pending = torch.log_softmax(logits / self.temperature, dim=-1)

    def finish(self, gen: torch.Tensor) -> torch.Tensor:
        """(B, T) generated ids -> (B, T) log-probs of those ids."""
        steps = gen.shape[1]
        if steps == 0:
            return gen.new_zeros(gen.shape, dtype=torch.float32)
        if len(self.chosen) < steps and self.pending is not None:
            self.chosen.append(self.pending.gather(-1, gen[:, len(self.chosen)].unsqueeze(-1)).squeeze(-1))
            self.tokens.append(gen[:, len(self.tokens)])
        self.pending = None
        if len(self.chosen) < steps or not torch.equal(torch.stack(self.tokens[:steps], dim=1), gen):
            raise RuntimeError("hf engine: the step log-probs do not line up with the generated tokens (a transformers "
                               "generate that calls the model differently); request logprobs=False or use "
                               "rollout.backend=fast")
        return torch.stack(self.chosen[:steps], dim=1)
