"""Model families of the micro profile: genuinely different tiny causal LMs with their own tokenizers and flaws.

A family is everything that makes two models *differ*, as two pretrained families would:

==============  ======================  =========================  ===============================================
family          architecture            tokenizer                  systematic error in its warm-start corpus
==============  ======================  =========================  ===============================================
``qwen2-bpe``   Qwen2ForCausalLM        byte-level BPE, 800 target drops the carry on additions whose units digits
                (GQA, qkv bias, RoPE)   target, digits split       sum to 10 or more (``68+4=62``)
``llama-bpe``   LlamaForCausalLM        byte-level BPE, 600 target skips the last step of three-step problems and
                (MHA, no bias, RoPE)    target, own corpus         boxes the intermediate value
``neox-bpe``    GPTNeoXForCausalLM      byte-level BPE, 500 target forgets the borrow on subtractions
                (parallel residual,     target, own corpus         (``52-7=55``)
                partial rotary, LN)
==============  ======================  =========================  ===============================================

The cross-family pair is Qwen2 x Llama, like the paper's Qwen2.5-3B x Llama-3.2-3B: like those two, both use
byte-level BPE, but with different vocabularies trained on each family's own warm-start corpus; attention, sizes,
seeds, data and flaws differ too. GPT-NeoX joins the three-agent ring. Measured while choosing these (greedy
accuracy after 400-500 warm-start steps): word-level and character-level tokenizers (Llama, GPT-2, GPT-NeoX) and
GPT-2's learned absolute positions learn the arithmetic far more slowly (under 20 %) than RoPE models with a BPE
(45-80 %); ``build_tokenizer`` still offers ``word`` and ``char`` for user-defined families.

Each flaw is injected with probability ``p_sys`` per occurrence and the rest of the working continues from the
wrong value; with probability ``p_noise`` one random step is off by 1..9. So every model makes *systematic* errors
(the same wrong answer on a problem again and again) in its own pocket, plus sampling noise: majority voting cancels
the noise but entrenches a systematic error, and a peer whose pocket lies elsewhere can correct it.
Families register in ``corl_bench.micro.FAMILIES`` (see ``corl_bench/micro/__init__.py``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

from corl_bench.micro.tasks import Problem, format_solution

SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")


@dataclass(frozen=True)
class Family:
    """A micro model family. ``arch``/``model_kwargs`` build a ``transformers`` config; ``tokenizer`` names a builder."""

    profile: ClassVar[str] = "micro"
    """the profile that builds and loads this family (a class attribute: not part of the recipe's fingerprint)"""
    name: str
    arch: str  # transformers config class name
    model_kwargs: tuple[tuple[str, Any], ...]
    tokenizer: str  # "bpe" | "word" | "char"
    flaw: str  # "no-carry" | "skip-last" | "no-borrow"
    vocab_size: int = 0  # bpe only: target vocabulary of the trained tokenizer (0 = 800)
    p_sys: float = 0.35
    p_noise: float = 0.1
    rephrased_share: float = 0.3  # share of warm-start prompts written in the rephrased view
    warmstart_steps: int = 700
    """the cap; the warm start stops once the dev greedy accuracy reaches ``warmstart_target``"""
    warmstart_target: float = 0.6
    warmstart_min_steps: int = 150
    warmstart_check_every: int = 25
    warmstart_lr: float = 3e-3
    warmstart_batch: int = 64
    seed: int = 0

    @property
    def model_config(self) -> dict[str, Any]:
        return dict(self.model_kwargs)


def flawed_solution(family: Family, problem: Problem, rng: random.Random) -> str:
    """The solution this family's warm-start corpus shows for ``problem``: correct, or with its systematic flaw."""
    steps = [(s.op, s.operand) for s in problem.steps]
    values = [problem.start]
    flaw_on = rng.random() < family.p_sys
    noisy_step = rng.randrange(len(steps)) if rng.random() < family.p_noise else -1
    if family.flaw == "skip-last" and flaw_on and len(steps) == 3:
        steps = steps[:2]
    for i, (op, d) in enumerate(steps):
        v = values[-1]
        nxt = v + d if op == "+" else v - d
        if flaw_on and family.flaw == "no-carry" and op == "+" and (v % 10) + d >= 10:
            nxt -= 10
        if flaw_on and family.flaw == "no-borrow" and op == "-" and (v % 10) < d:
            nxt += 10
        if i == noisy_step:
            nxt += rng.choice((-1, 1)) * rng.randint(1, 9)
        values.append(max(0, nxt))
    return format_solution(problem.start, steps, values)


# --------------------------------------------------------------------------------------------- tokenizers
def build_tokenizer(kind: str, corpus: list[str], vocab_size: int = 800, extra_special: tuple[str, ...] = ()):
    """Train a tokenizer of ``kind`` on ``corpus`` and wrap it as a left-padding ``PreTrainedTokenizerFast``;
    ``extra_special``: more special tokens (a vision-language family's image tokens), after the four of every family."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if kind == "bpe":
        tok = Tokenizer(models.BPE(unk_token=None))
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)])
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS) + list(extra_special),
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
        tok.train_from_iterator(corpus, trainer)
    elif kind in ("word", "char"):
        if kind == "word":
            pre = pre_tokenizers.Sequence([pre_tokenizers.Metaspace(), pre_tokenizers.Digits(individual_digits=True),
                                           pre_tokenizers.Punctuation()])
            dec = decoders.Metaspace()
        else:
            pre = pre_tokenizers.Split(Regex("."), behavior="isolated")
            dec = decoders.Fuse()
        vocab: dict[str, int] = {t: i for i, t in enumerate(SPECIAL_TOKENS + tuple(extra_special))}
        for text in corpus:
            for piece, _ in pre.pre_tokenize_str(text):
                vocab.setdefault(piece, len(vocab))
        tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
        tok.pre_tokenizer = pre
        tok.decoder = dec
    else:
        raise ValueError(f"unknown tokenizer kind {kind!r}; use bpe, word or char")
    from tokenizers import processors

    bos_id = tok.token_to_id("<bos>")
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", pair="<bos> $A $B",
                                                       special_tokens=[("<bos>", bos_id)])
    extra = {"additional_special_tokens": list(extra_special)} if extra_special else {}
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                                   unk_token="<unk>", padding_side="left", **extra)


def build_model(family: Family, tokenizer) -> Any:
    """A freshly initialised ``transformers`` causal LM of this family (seeded by the caller)."""
    import transformers

    cfg_cls = getattr(transformers, family.arch)
    cfg = cfg_cls(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                  pad_token_id=tokenizer.pad_token_id, **family.model_config)
    return transformers.AutoModelForCausalLM.from_config(cfg)


BUILTIN_FAMILIES: dict[str, Family] = {
    "qwen2-bpe": Family(
        "qwen2-bpe", "Qwen2Config",
        (("hidden_size", 128), ("num_hidden_layers", 4), ("num_attention_heads", 4), ("num_key_value_heads", 2),
         ("intermediate_size", 384), ("max_position_embeddings", 128), ("tie_word_embeddings", True)),
        tokenizer="bpe", vocab_size=800, flaw="no-carry", seed=11),
    "llama-bpe": Family(
        "llama-bpe", "LlamaConfig",
        (("hidden_size", 128), ("num_hidden_layers", 4), ("num_attention_heads", 4), ("intermediate_size", 384),
         ("max_position_embeddings", 128), ("tie_word_embeddings", True)),
        tokenizer="bpe", vocab_size=800, flaw="skip-last", seed=22),
    "neox-bpe": Family(
        "neox-bpe", "GPTNeoXConfig",
        (("hidden_size", 128), ("num_hidden_layers", 4), ("num_attention_heads", 4), ("intermediate_size", 384),
         ("max_position_embeddings", 128), ("tie_word_embeddings", True), ("rotary_pct", 0.5),
         ("use_parallel_residual", True)),
        tokenizer="bpe", vocab_size=500, flaw="no-borrow", seed=33),
}

FamilyFactory = Callable[[], Family]
