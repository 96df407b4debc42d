"""The hf rollout engine on a tiny random model: shapes, seeding, padding invariance, logprobs."""

from __future__ import annotations

import pytest
import torch

from corl_bench.rollout import SamplingParams, make_engine
from corl_bench.micro.warmstart import render_prompt

PROMPTS = [render_prompt("Uma has 40 apples. Uma finds 9 and sells 3. How many apples now?"),
           render_prompt("Ben has 12 coins. Ben loses 4, wins 8 and eats 2. How many coins now?"),
           render_prompt("Ava has 77 pens. Ava gets 6 and buys 5. How many pens now?")]


@pytest.fixture()
def engine(tiny_qwen):
    model, tok = tiny_qwen
    return make_engine("hf", model, tok)


def test_generate_returns_n_completions_per_prompt_in_prompt_order(engine):
    out = engine.generate(PROMPTS, SamplingParams(n=3, max_new_tokens=8, seed=1))
    assert [len(row) for row in out] == [3, 3, 3]
    for row in out:
        for c in row:
            assert 1 <= len(c.token_ids) <= 8 and len(c.logprobs) == len(c.token_ids)
            assert all(lp <= 0.0 for lp in c.logprobs)
            assert c.finished == (c.token_ids[-1] == engine.tokenizer.eos_token_id)


def test_same_seed_same_samples_and_different_seed_different_samples(engine):
    p = SamplingParams(n=4, max_new_tokens=10, seed=7)
    a, b = engine.generate(PROMPTS, p), engine.generate(PROMPTS, p)
    c = engine.generate(PROMPTS, SamplingParams(n=4, max_new_tokens=10, seed=8))
    ids = lambda out: [c.token_ids for row in out for c in row]  # noqa: E731
    assert ids(a) == ids(b)
    assert ids(a) != ids(c)


def test_seeded_generation_does_not_touch_the_global_rng(engine):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    engine.generate(PROMPTS, SamplingParams(n=2, max_new_tokens=5, seed=99))
    assert torch.equal(torch.rand(3), expected)


def test_greedy_output_does_not_depend_on_left_padding(engine):
    greedy = SamplingParams(n=1, greedy=True, max_new_tokens=8)
    batched = engine.generate(PROMPTS, greedy)
    alone = [engine.generate([p], greedy)[0] for p in PROMPTS]
    assert [r[0].token_ids for r in batched] == [r[0].token_ids for r in alone]


def test_logprobs_match_a_fresh_forward_pass_at_the_sampling_temperature(engine):
    model, tok = engine.model, engine.tokenizer
    temp = 0.7
    out = engine.generate(PROMPTS[:1], SamplingParams(n=1, temperature=temp, max_new_tokens=8, seed=3))[0][0]
    prompt_ids = tok(PROMPTS[0])["input_ids"]
    ids = torch.tensor([prompt_ids + list(out.token_ids)])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt_ids) - 1: -1] / temp
    expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(out.token_ids)[:, None]).squeeze(-1)
    assert torch.allclose(torch.tensor(out.logprobs), expected, atol=1e-4)


def test_greedy_needs_n_equal_one():
    with pytest.raises(ValueError, match="n=1"):
        SamplingParams(n=2, greedy=True)


def test_engine_refuses_right_padding_tokenizer(tiny_qwen):
    import copy

    model, tok = tiny_qwen
    right = copy.deepcopy(tok)
    right.padding_side = "right"
    with pytest.raises(ValueError, match="left"):
        make_engine("hf", model, right)


# ------------------------------------------------------------------------------------------------ fast backend
def test_fast_engine_greedy_equals_hf_generate(tiny_qwen):
    from corl_bench.rollout import SamplingParams, make_engine

    model, tok = tiny_qwen
    prompts = ["Ava has 12 coins.\n", "Tom has 40 apples. He eats 3 and finds 9. How many apples now?\n", "7+"]
    params = SamplingParams(n=1, greedy=True, max_new_tokens=12)
    hf = make_engine("hf", model, tok).generate(prompts, params)
    fast = make_engine("fast", model, tok).generate(prompts, params)
    assert [[c.token_ids for c in row] for row in fast] == [[c.token_ids for c in row] for row in hf]
    assert [[c.text for c in row] for row in fast] == [[c.text for c in row] for row in hf]


def test_fast_engine_samples_k_per_prompt_with_logprobs_of_a_fresh_forward(tiny_qwen):
    import torch

    from corl_bench.rollout import SamplingParams, make_engine

    model, tok = tiny_qwen
    prompts = ["Ava has 12 coins.\n", "Tom has 40 apples.\n"]
    params = SamplingParams(n=3, temperature=0.7, top_p=0.9, max_new_tokens=10, seed=5)
    out = make_engine("fast", model, tok).generate(prompts, params)
    again = make_engine("fast", model, tok).generate(prompts, params)
    assert [[c.token_ids for c in r] for r in out] == [[c.token_ids for c in r] for r in again]  # seeded
    assert len(out) == 2 and all(len(r) == 3 for r in out)
    c = out[1][2]
    ids = tok(prompts[1], return_tensors="pt")["input_ids"]
    full = torch.cat([ids, torch.tensor([c.token_ids])], dim=1)
    with torch.no_grad():
        logits = model(input_ids=full).logits[0, ids.shape[1] - 1: -1] / 0.7
    want = torch.log_softmax(logits, -1).gather(-1, torch.tensor(c.token_ids).unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(torch.tensor(c.logprobs), want, atol=1e-4)


def test_fast_engine_stops_rows_independently(tiny_qwen):
    from corl_bench.rollout import SamplingParams, make_engine

    model, tok = tiny_qwen
    prompts = [f"Ava has {i} coins.\n" for i in range(8)]
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=15, seed=1, stop=("=",))
    for row in make_engine("fast", model, tok).generate(prompts, params):
        for c in row:
            assert "=" not in c.text
            assert len(c.token_ids) <= 15


def test_fast_engine_sampler_draws_the_categorical_distribution_and_never_a_zero_weight():
    import torch

    from corl_bench.rollout.fast import _categorical

    torch.manual_seed(0)
    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3, 0.0], [0.0, 0.0, 0.0, 0.0, 1.0], [1e-6, 0.5, 0.0, 0.5 - 1e-6, 0.0]])
    draws = torch.stack([_categorical(probs) for _ in range(20_000)])  # (draws, rows)
    for row in range(3):
        freq = torch.bincount(draws[:, row], minlength=5).double() / draws.shape[0]
        assert (freq[probs[row] == 0] == 0).all()
        assert torch.allclose(freq, probs[row].double(), atol=0.012), (row, freq)
    unnormalised = torch.tensor([[2.0, 0.0, 6.0]])  # weights need not sum to one
    freq = torch.bincount(torch.cat([_categorical(unnormalised) for _ in range(20_000)]), minlength=3) / 20_000.0
    assert abs(float(freq[0]) - 0.25) < 0.012 and float(freq[1]) == 0.0
