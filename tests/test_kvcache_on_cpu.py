"""The fast engine's in-place KV cache and its sampler, against transformers' own DynamicCache and logits warpers."""

from __future__ import annotations

import pytest
import torch

from corl_bench.rollout import SamplingParams, make_engine
from corl_bench.rollout.fast import _MIN_SHARED, _common_prefix, _sample
from corl_bench.rollout.kvcache import GrowingLayer, growing_cache
from tests.conftest import build_tiny

transformers_cache = pytest.importorskip("transformers.cache_utils")


def _kv(b, t, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, 2, t, 4, generator=g), torch.randn(b, 2, t, 4, generator=g)


def test_growing_layer_returns_what_dynamic_layer_returns_through_growth_repeat_and_select():
    grow, dyn = GrowingLayer(reserve=3, limit=40), transformers_cache.DynamicLayer()
    steps = [(2, 7)] + [(2, 1)] * 9  # a 7-token prefill of 2 prompts, then 9 single tokens
    for i, (b, t) in enumerate(steps):
        if i == 1:  # the k samples of a prompt share its prefill
            grow.batch_repeat_interleave(3)
            dyn.batch_repeat_interleave(3)
        if i == 5:  # two finished rows leave the batch
            keep = torch.tensor([0, 2, 3, 5])
            grow.batch_select_indices(keep)
            dyn.batch_select_indices(keep)
        rows = dyn.keys.shape[0] if dyn.keys is not None and dyn.keys.numel() else b
        k, v = _kv(rows, t, seed=i)
        gk, gv = grow.update(k, v)
        dk, dv = dyn.update(k, v)
        assert torch.equal(gk, dk) and torch.equal(gv, dv)
        assert grow.get_seq_length() == dyn.get_seq_length()
    assert grow._k.shape[-2] <= 40  # never allocates beyond the limit


def test_growing_layer_reallocates_a_logarithmic_number_of_times():
    layer, allocations, last = GrowingLayer(reserve=4, limit=None), 0, None
    for i in range(500):
        layer.update(*_kv(1, 1, seed=i))
        if layer._k.data_ptr() != last:
            allocations, last = allocations + 1, layer._k.data_ptr()
    assert layer.get_seq_length() == 500 and allocations <= 14  # 5, 9, 13, 19, ...: x1.5, O(T) copies in all


@pytest.mark.parametrize("family", ["qwen2-bpe", "llama-bpe", "neox-bpe"])
def test_fast_engine_draws_the_same_tokens_with_either_cache(family):
    model, tok = build_tiny(family)
    assert growing_cache(model, reserve=8) is not None
    prompts = ["Ava has 12 coins.\n", "Tom has 40 apples. He eats 3 and finds 9. How many apples now?\n", "7+"]
    # 90 tokens > the 64-token reserve (the cache grows); stop strings end rows at different steps (compaction)
    for params in (SamplingParams(n=4, temperature=0.8, top_p=0.9, max_new_tokens=90, seed=3, stop=("=", "7")),
                   SamplingParams(n=1, greedy=True, max_new_tokens=70)):
        grown = make_engine("fast", model, tok, grow_cache=True).generate(prompts, params)
        plain = make_engine("fast", model, tok, grow_cache=False).generate(prompts, params)
        assert [[c.token_ids for c in r] for r in grown] == [[c.token_ids for c in r] for r in plain]
        assert [[c.logprobs for c in r] for r in grown] == [[c.logprobs for c in r] for r in plain]
        assert [[c.text for c in r] for r in grown] == [[c.text for c in r] for r in plain]


def test_sliding_window_models_grow_in_place_only_when_the_generation_fits_the_window():
    from types import SimpleNamespace

    def model(**cfg):
        return SimpleNamespace(config=SimpleNamespace(num_hidden_layers=2, is_encoder_decoder=False, **cfg))

    mixed = model(layer_types=["full_attention", "sliding_attention"], sliding_window=512)
    assert growing_cache(mixed, reserve=8) is None  # no limit: the window could be reached
    assert growing_cache(mixed, reserve=8, limit=512) is None
    assert growing_cache(mixed, reserve=8, limit=511) is not None
    assert growing_cache(model(sliding_window=4096), reserve=8) is None
    assert growing_cache(model(sliding_window=4096), reserve=8, limit=200) is not None
    assert growing_cache(model(sliding_window=4096, use_sliding_window=False), reserve=8) is not None
    assert growing_cache(model(layer_types=["full_attention", "linear_attention"]), reserve=8, limit=9) is None
    assert growing_cache(SimpleNamespace(config=SimpleNamespace(is_encoder_decoder=True)), reserve=8) is None


def _tiny_gemma3(vocab: int, window: int):
    """A random Gemma-3 text model (sliding and full layers, as Gemma-3-270M interleaves them) on a micro vocabulary."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(0)
    cfg = Gemma3TextConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                           num_attention_heads=2, num_key_value_heads=1, head_dim=16, sliding_window=window,
                           layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                           max_position_embeddings=256)
    return Gemma3ForCausalLM(cfg).eval()


@pytest.mark.parametrize("prefix_cache", [False, True])
def test_a_sliding_window_model_draws_the_same_tokens_with_either_cache_inside_its_window(prefix_cache):
    _, tok = build_tiny("qwen2-bpe")
    model = _tiny_gemma3(len(tok), window=128)
    head = "Question: Ava has 12 coins and 3 friends; each friend gives her 2 more coins. "  # a shared head
    prompts = [head + "How many?\n", head + "Tom has 40 apples.\n", head + "7+"]
    for params in (SamplingParams(n=3, temperature=0.9, max_new_tokens=20, seed=5, stop=("=",)),
                   SamplingParams(n=1, greedy=True, max_new_tokens=24)):
        enc = tok(prompts, padding=True)
        assert len(enc["input_ids"][0]) + params.max_new_tokens < 128  # inside the window: the growing cache
        assert not prefix_cache or _common_prefix(tok(prompts, padding=True, return_tensors="pt")) >= _MIN_SHARED
        grown = make_engine("fast", model, tok, prefix_cache=prefix_cache).generate(prompts, params)
        plain = make_engine("fast", model, tok, prefix_cache=prefix_cache, grow_cache=False).generate(prompts,
                                                                                                       params)
        assert [[(c.token_ids, c.logprobs) for c in r] for r in grown] == \
            [[(c.token_ids, c.logprobs) for c in r] for r in plain]
    assert growing_cache(model, reserve=8, limit=128) is None  # a longer one keeps the model's own cache


def _hf_nucleus(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """The exact distribution transformers' ``generate`` samples from (temperature, then top-p, no top-k)."""
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopPLogitsWarper

    scores = TemperatureLogitsWarper(temperature)(None, logits.clone())
    scores = TopPLogitsWarper(top_p)(None, scores)
    return torch.softmax(scores, dim=-1)


@pytest.mark.parametrize("vocab,spread", [(300, 3.0), (1000, 0.05)])  # peaked; flat (top 256 hold < top_p)
def test_sampler_draws_from_the_same_nucleus_distribution_as_transformers(vocab, spread):
    g = torch.Generator().manual_seed(vocab)
    logits = torch.randn(2, vocab, generator=g) * spread
    params = SamplingParams(n=1, temperature=0.6, top_p=0.95, seed=0)
    draws = 40_000
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        for row in logits:
            want = _hf_nucleus(row.unsqueeze(0), 0.6, 0.95)[0]
            got = _sample(row.expand(draws, vocab).contiguous(), params)
            freq = torch.bincount(got, minlength=vocab).double() / draws
            assert bool((freq[want == 0] == 0).all()), "sampled a token outside transformers' nucleus"
            noise = 0.5 * float((want.double() * (1 - want.double()) / draws).sqrt().sum())  # E|freq - p| / 2
            assert 0.5 * float((freq - want.double()).abs().sum()) < 3 * noise + 1e-3
