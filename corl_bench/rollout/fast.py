"""The ``fast`` backend: a lean sampling loop over a ``transformers`` causal LM, for evaluation-sized batches.

Three savings over ``model.generate`` (and over lm-eval's HF backend, which calls it), none of which changes what
is computed for a sequence:

* **one prefill per distinct prompt**: the k samples of a prompt share its KV cache (``batch_repeat_interleave``)
  instead of recomputing the prompt k times — with long chat prompts and k = 8 (AMC avg@8) the prefill is most of
  the cost on CPU;
* **finished rows leave the batch**: a sequence that produced EOS or a stop string is dropped from the cache
  (``batch_select_indices``) instead of being decoded to the longest sequence's length — at a 3072-token cap most
  rows finish far earlier;
* **the KV cache grows in place** (:mod:`corl_bench.rollout.kvcache`): ``DynamicCache`` (what ``generate`` uses)
  copies every layer's whole cache with ``torch.cat`` at every token, O(T²) bytes for T tokens, which on CPU costs
  as much as the matrix products at a few hundred tokens of context; the growing cache writes each token into
  spare room and grows by half when full (O(T)). ``grow_cache=False`` keeps ``DynamicCache`` (the speed ablation).

Like ``generate``, the prefill asks for the last position's logits only (``logits_to_keep=1``).

Vision-language models take the same path: the prefill carries the batch's image inputs (one prefill of image and
prompt shared by the k samples; images are most of a multimodal prompt), decode steps carry token ids only. Models
with multimodal rotary positions (Qwen2-VL, Qwen2.5-VL: ``get_rope_index``) get their (3, B, L) position ids from the
model itself at the prefill, then advance them by one per token, as ``generate`` does.

``dtype`` (``rollout.engine_options: {dtype: bfloat16}``): the engine decodes with its own copy of the module in that
dtype, refreshed from the trainer's weights after every update (:meth:`FastEngine.sync_weights`), as a bf16 vLLM
engine serves an fp32 trainer on GPUs. Decoding is bound by reading the weights, so bf16 halves that read (and CPUs
with AMX run its matrix products in bf16): SmolLM2-135M 8 x 4 x 128 decodes 1.5x faster here
(``scripts/bench_suite.py --precision bf16``). The samples then come from the bf16 model, and the log-probs the
engine reports are the bf16 model's: ``engine/logp_gap_mean`` shows the difference from the fp32 trainer and
``grpo.behaviour_is_cap`` corrects for it. Off by default (the agent's module itself, nothing copied).

Sampling is exact temperature + nucleus (top-p) sampling; the nucleus is searched among the 256 most likely tokens
and, for the rare row whose top 256 hold less than ``top_p`` of the mass, over the full vocabulary. Seeded per
call (``SamplingParams.seed``) inside ``fork_rng``, as the ``hf`` backend. Logprobs are of the raw logits at the
sampling temperature, as the ``hf`` backend reports them.
"""

from __future__ import annotations

import copy
import logging
from typing import Any, Sequence

import torch

from corl_bench.rollout.base import Completion, InProcessEngine, SamplingParams
from corl_bench.rollout.request import Prompt
from corl_bench.rollout.kvcache import growing_cache

log = logging.getLogger(__name__)
_TOPK = 256
_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
_COMPACT_AT = 0.25  # drop finished rows once this share of the batch has finished
_RESERVE = 64  # KV-cache room allocated beyond the prompt (it then grows by half whenever full)


def _categorical(weights: torch.Tensor) -> torch.Tensor:
    """(B, K) non-negative weights -> (B,) one index per row drawn with probability weight / row sum.

    Exact inverse-CDF sampling: the float64 cumulative sum, one uniform per row scaled to the row's mass, a binary
    search (the first index whose cumulative mass exceeds it, so zero-weight entries are never drawn). The same
    distribution as ``torch.multinomial(weights, 1)``, other random numbers, and on the CPU about 5x faster over a
    49k vocabulary (``torch.multinomial`` took 54 ms per call at 32 x 49,152 here, most of a SmolLM2 decode step)."""
    cum = weights.double().cumsum(-1)
    u = torch.rand((weights.shape[0], 1), dtype=torch.float64, device=weights.device) * cum[:, -1:]
    return torch.searchsorted(cum, u, right=True).squeeze(-1).clamp_(max=weights.shape[-1] - 1)


def _sample(logits: torch.Tensor, params: SamplingParams, logp: torch.Tensor | None = None) -> torch.Tensor:
    """(B, V) raw logits -> (B,) sampled token ids (greedy, or temperature + top-p); ``logp``: the (B, V)
    ``log_softmax(logits / T)`` when the caller has it already (the probabilities are its exp)."""
    if params.greedy:
        return logits.argmax(-1)
    probs = logp.exp() if logp is not None else torch.softmax(logits / params.temperature, dim=-1)
    if params.top_p >= 1.0:
        return _categorical(probs)
    k = min(_TOPK, probs.shape[-1])
    top_p, top_i = probs.topk(k, dim=-1)  # sorted descending
    cum = top_p.cumsum(-1)
    enough = cum[:, -1] >= params.top_p
    out = torch.empty(probs.shape[0], dtype=torch.long)
    if bool(enough.any()):
        p = top_p[enough].clone()
        p[(cum[enough] - p) >= params.top_p] = 0.0  # keep the smallest prefix whose mass reaches top_p
        out[enough] = top_i[enough].gather(-1, _categorical(p).unsqueeze(-1)).squeeze(-1)
    if not bool(enough.all()):
        rest = probs[~enough]
        sp, si = rest.sort(-1, descending=True)
        c = sp.cumsum(-1)
        sp[(c - sp) >= params.top_p] = 0.0
        out[~enough] = si.gather(-1, _categorical(sp).unsqueeze(-1)).squeeze(-1)
    return out


def _prefill_positions(model: Any, enc: dict[str, Any], pos: torch.Tensor) -> torch.Tensor:
    """Position ids of the prefill: ``pos`` (B, L), or for a model with multimodal rotary positions given images the
    model's own (3, B, L) (``get_rope_index``: image tokens by their temporal / height / width grid)."""
    rope = getattr(getattr(model, "model", None), "get_rope_index", None)
    if rope is None or "image_grid_thw" not in enc:
        return pos
    kwargs = {k: v for k, v in enc.items() if k in ("image_grid_thw", "mm_token_type_ids")}
    positions, _ = rope(enc["input_ids"], attention_mask=enc["attention_mask"], **kwargs)
    return positions


_MIN_SHARED = 16  # a common prompt head shorter than this is prefilled with the rest (not worth a second call)


def _common_prefix(enc: dict[str, Any]) -> int:
    """How many leading tokens every row of a left-padded batch has in common, leaving each row at least one token
    of its own (0 for a single row)."""
    ids, att = enc["input_ids"], enc["attention_mask"]
    if ids.shape[0] < 2:
        return 0
    lengths = att.sum(-1)
    shortest = int(lengths.min()) - 1
    if shortest < 1:
        return 0
    starts = (ids.shape[1] - lengths).unsqueeze(-1)
    aligned = ids.gather(1, starts + torch.arange(shortest, device=ids.device))  # (B, shortest) from each row's start
    same = (aligned == aligned[:1]).all(0)
    return shortest if bool(same.all()) else int((~same).nonzero()[0, 0])


def _contiguous_head(model: Any) -> None:
    """Give the LM head of a bf16 / fp16 copy a contiguous input.

    With ``logits_to_keep=1`` the head reads ``hidden[:, -1:, :]``, a strided (B, 1, H) view; ``torch.nn.functional
    .linear`` cannot fold that into one matrix product and calls ``bmm`` with the weight broadcast B times, which in
    bf16 goes to oneDNN, which asks for the broadcast weight as one block (Gemma-3: 96 x 262 144 x 640 x 2 bytes =
    32 GB). The allocation fails, PyTorch falls back and *turns oneDNN off for the whole process* (pytorch PR
    #115936's fallback: ``setUserEnabledMkldnn(false)``), so every later bf16 matrix product takes the reference
    path, about 10x slower here. A contiguous input is one ``mm``: the same numbers, no broadcast. Not applied to
    fp32 modules (their ``bmm`` is BLAS, and their results stay what they were)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None:
        head.register_forward_pre_hook(lambda _module, args: (args[0].contiguous(), *args[1:]))


class FastEngine(InProcessEngine):
    """Rollouts with shared prefill and batch compaction (same interface as ``HFEngine``)."""

    supports_images = True

    def __init__(self, model: Any, tokenizer: Any, *, max_batch: int = 256, grow_cache: bool = True,
                 prefix_cache: bool = False, dtype: str = "") -> None:
        if tokenizer.padding_side != "left":
            raise ValueError("the fast rollout engine needs a left-padding tokenizer (padding_side='left')")
        self.model = model
        self._copy = False
        if dtype:  # decode with a copy of the module in this dtype (module docstring)
            want = _DTYPES.get(dtype)
            if want is None:
                raise ValueError(f"rollout.engine_options.dtype must be one of {', '.join(_DTYPES)} (got {dtype!r}); "
                                 "or leave it out to decode with the agent's own weights")
            if want != next(model.parameters()).dtype:
                self.model = copy.deepcopy(model).to(want).requires_grad_(False)
                self._copy = True
                if want != torch.float32:  # the two CPU traps of a low-precision copy
                    _contiguous_head(self.model)
                    if hasattr(self.model, "set_attn_implementation"):
                        self.model.set_attn_implementation("eager")  # PyTorch's CPU SDPA is ~3x slower in bf16
        self.tokenizer = tokenizer
        self.max_batch = max_batch
        self.grow_cache = grow_cache
        self.prefix_cache = prefix_cache
        import inspect
        # transformers >= 5.x names the cache argument ``cache`` (``past_key_values`` is deprecated there)
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        # the prefill needs the next-token logits of the last position only: skip the LM head on every other one
        # (for SmolLM2, vocab 49 152 x hidden 576, that head is a fifth of the prefill's FLOPs)
        self._last_only = {"logits_to_keep": 1} if "logits_to_keep" in params else {}

    @torch.no_grad()
    def sync_weights(self, model: Any) -> None:
        """With ``dtype``: copy ``model``'s parameters and buffers into the engine's copy (cast); else nothing (the
        engine reads the live module)."""
        if not self._copy:
            return
        mine = dict(self.model.named_parameters())
        mine.update(self.model.named_buffers())
        for name, src in [*model.named_parameters(), *model.named_buffers()]:
            dst = mine.get(name)
            if dst is None or dst.shape != src.shape:
                raise RuntimeError(f"the fast engine's copy does not match the trainer's {name} (missing or another "
                                   "shape): the module changed structure after the engine was built")
            dst.copy_(src)

    @torch.no_grad()
    def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        was_training = self.model.training
        self.model.eval()
        onednn = torch.backends.mkldnn.enabled
        per_chunk = max(1, self.max_batch // params.n)
        out: list[list[Completion]] = []
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(params.seed)
                for i in range(0, len(prompts), per_chunk):
                    out.extend(self._generate_chunk(list(prompts[i: i + per_chunk]), params))
        finally:
            self.model.train(was_training)
            if onednn and not torch.backends.mkldnn.enabled:  # a failed oneDNN call switched it off process-wide
                log.warning("PyTorch turned oneDNN off during generation (a bf16 matrix product failed); turned it "
                            "back on, or every later bf16 product runs ~10x slower")
                torch.backends.mkldnn.enabled = True
        return out

    def _generate_chunk(self, prompts: list[Prompt], params: SamplingParams) -> list[list[Completion]]:
        tok, n = self.tokenizer, params.n
        device = next(self.model.parameters()).device
        enc = self.encode(prompts, device)
        if self._copy:  # image inputs in the copy's dtype
            dt = next(self.model.parameters()).dtype
            enc = {k: v.to(dt) if torch.is_tensor(v) and v.is_floating_point() else v for k, v in enc.items()}
        att = enc["attention_mask"]
        pos = _prefill_positions(self.model, enc, (att.cumsum(-1) - 1).clamp(min=0))
        extra = {**self._last_only, **{k: v for k, v in enc.items() if k not in ("input_ids", "attention_mask")}}
        cache = growing_cache(self.model, reserve=_RESERVE, limit=att.shape[1] + params.max_new_tokens) \
            if self.grow_cache else None
        if cache is not None:
            extra[self._cache_kw] = cache
        text_only = all(k in ("input_ids", "attention_mask") for k in enc)
        shared = _common_prefix(enc) if self.prefix_cache and text_only else 0
        if shared >= _MIN_SHARED:  # text prompts with a long common head: prefill it once, then each row's rest
            res, att, pos = self._prefill_shared(enc, shared, cache)
        else:
            res = self.model(input_ids=enc["input_ids"], attention_mask=att, position_ids=pos, use_cache=True,
                             **extra)
        cache, logits = getattr(res, self._cache_kw), res.logits[:, -1, :].float()
        row = pos.dim() - 2  # the batch axis of the position ids: 0, or 1 for (3, B, L) rotary positions
        if n > 1:  # the k samples of a prompt share its prefill
            cache.batch_repeat_interleave(n)
            att, pos, logits = (att.repeat_interleave(n, 0), pos.repeat_interleave(n, row),
                                logits.repeat_interleave(n, 0))
        rows = len(prompts) * n
        tokens: list[list[int]] = [[] for _ in range(rows)]
        lps: list[list[float]] = [[] for _ in range(rows)]
        finished = [False] * rows
        stopped = [False] * rows
        active = list(range(rows))  # batch row -> sequence index; -1 once that sequence is done
        eos = tok.eos_token_id
        temp = 1.0 if params.greedy else params.temperature
        codec = self.processor.codec  # a VLM never samples its image-layout tokens (the raw log-probs are unchanged)
        banned = torch.tensor(codec.layout_ids, device=device) if codec is not None else None
        for _ in range(params.max_new_tokens):
            logp = torch.log_softmax(logits / temp, dim=-1) if params.logprobs else None
            if banned is None:
                nxt = _sample(logits, params, logp)
            else:
                nxt = _sample(logits.index_fill(-1, banned, float("-inf")), params)
            chosen = logp.gather(-1, nxt.unsqueeze(-1)).squeeze(-1).tolist() if logp is not None else None
            picked = nxt.tolist()  # one conversion per step, not one tensor access per row
            for b, seq in enumerate(active):
                if seq < 0:
                    continue
                t = picked[b]
                tokens[seq].append(t)
                if chosen is not None:
                    lps[seq].append(chosen[b])
                if t == eos:
                    finished[seq], active[b] = True, -1
                elif params.stop and self._hit_stop(tokens[seq], params.stop):
                    stopped[seq], active[b] = True, -1
            live = [b for b, seq in enumerate(active) if seq >= 0]
            if not live:
                break
            att = torch.cat([att, torch.ones((att.shape[0], 1), dtype=att.dtype, device=device)], dim=-1)
            pos = pos[..., -1:] + 1
            inp = nxt.unsqueeze(-1)
            if len(live) <= (1.0 - _COMPACT_AT) * len(active):  # enough rows are done: drop them from the batch
                idx = torch.tensor(live, device=device)
                cache.batch_select_indices(idx)
                att, pos, inp = att[idx], pos.index_select(row, idx), inp[idx]
                active = [active[b] for b in live]
            res = self.model(input_ids=inp, attention_mask=att, position_ids=pos, use_cache=True,
                             **{self._cache_kw: cache})
            cache, logits = getattr(res, self._cache_kw), res.logits[:, -1, :].float()
        return self._completions(tokens, lps, finished, stopped, params, n, len(prompts))

    def _prefill_shared(self, enc: dict[str, Any], shared: int, cache: Any) -> tuple[Any, torch.Tensor, torch.Tensor]:
        """The prefill of a batch whose rows begin with the same ``shared`` tokens (a few-shot prompt, a system
        prompt): those tokens once (batch 1), their cache repeated for every row, then every row's remaining tokens
        (left-padded, so the pads sit between the shared head and the rest, masked out). Returns the model output
        and the (B, shared + S) attention mask and position ids the decode steps continue from."""
        ids, att = enc["input_ids"], enc["attention_mask"]
        width, device = ids.shape[1], ids.device
        starts = (width - att.sum(-1)).unsqueeze(-1)  # each row's first token
        start, first = int(starts.min()), int(starts[0])  # the longest row's; row 0's
        head = ids[:1, first: first + shared]
        own = {self._cache_kw: cache} if cache is not None else {}  # else the model's own cache class (Gemma-3)
        first_res = self.model(input_ids=head, attention_mask=torch.ones_like(head), use_cache=True,
                               position_ids=torch.arange(shared, device=device).unsqueeze(0), **self._last_only, **own)
        cache = getattr(first_res, self._cache_kw)
        cache.batch_repeat_interleave(ids.shape[0])
        # every row's own tokens are right-aligned; a row that starts later still has head tokens in these columns
        columns = torch.arange(start + shared, width, device=device).unsqueeze(0)
        rest, rest_att = ids[:, start + shared:], att[:, start + shared:] * (columns >= starts + shared)
        full = torch.cat([torch.ones((ids.shape[0], shared), dtype=att.dtype, device=device), rest_att], dim=-1)
        pos = (shared + rest_att.cumsum(-1) - 1).clamp(min=shared - 1)
        res = self.model(input_ids=rest, attention_mask=full, position_ids=pos, use_cache=True, **self._last_only,
                         **{self._cache_kw: cache})
        return res, full, pos

    def _hit_stop(self, ids: list[int], stop: tuple[str, ...]) -> bool:
        tail = self.tokenizer.decode(ids[-16:], skip_special_tokens=True)
        return any(s in tail for s in stop)

    def _completions(self, tokens, lps, finished, stopped, params, n, n_prompts) -> list[list[Completion]]:
        tok, eos = self.tokenizer, self.tokenizer.eos_token_id
        comps = []
        for seq, ids in enumerate(tokens):
            text = tok.decode([t for t in ids if t != eos], skip_special_tokens=True)
            done = finished[seq] or stopped[seq]
            if params.stop:
                cut = min((i for i in (text.find(s) for s in params.stop) if i >= 0), default=-1)
                if cut >= 0:
                    text, done = text[:cut], True
            comps.append(Completion(tuple(ids), tuple(lps[seq]), text, done))
        return [comps[i * n: (i + 1) * n] for i in range(n_prompts)]
