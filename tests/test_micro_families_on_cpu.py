"""Micro families: tokenizers of every kind round-trip the task text; every builtin family builds its architecture."""

from __future__ import annotations

import itertools
import math

import pytest

from corl_bench.micro.families import BUILTIN_FAMILIES, build_model, build_tokenizer
from corl_bench.micro.tasks import problem_stream
from corl_bench.micro.warmstart import cosine_factor, render_prompt

PROBLEMS = list(itertools.islice(problem_stream(3), 200))
CORPUS = [render_prompt(p.text(v)) + p.solution() for p in PROBLEMS for v in ("original", "rephrased")]


@pytest.mark.parametrize("kind", ["bpe", "word", "char"])
def test_tokenizer_round_trips_prompts_and_solutions_and_splits_digits(kind):
    tok = build_tokenizer(kind, CORPUS, vocab_size=300)
    assert tok.padding_side == "left"
    for p in PROBLEMS[:20]:
        ids = tok(render_prompt(p.text()))["input_ids"]
        assert ids[0] == tok.bos_token_id
        sol = p.solution()
        sol_ids = tok(sol, add_special_tokens=False)["input_ids"]
        assert tok.decode(sol_ids, skip_special_tokens=True).strip() == sol
        digits = [t for t in tok.convert_ids_to_tokens(sol_ids) if any(c.isdigit() for c in t)]
        assert all(sum(c.isdigit() for c in t) == 1 for t in digits)  # one digit per token


@pytest.mark.parametrize("name", sorted(BUILTIN_FAMILIES))
def test_builtin_family_builds_its_own_architecture(name):
    fam = BUILTIN_FAMILIES[name]
    tok = build_tokenizer(fam.tokenizer, CORPUS, vocab_size=fam.vocab_size or 800)
    model = build_model(fam, tok)
    assert type(model.config).__name__ == fam.arch
    assert model.config.vocab_size == len(tok)


def test_builtin_families_differ_in_architecture_and_seed():
    fams = list(BUILTIN_FAMILIES.values())
    assert len({f.arch for f in fams}) == len(fams) >= 3
    assert len({f.seed for f in fams}) == len(fams)
    assert len({f.flaw for f in fams}) == len(fams)


def test_warm_start_schedule_warms_up_then_decays_to_ten_percent_at_the_cap():
    steps = 100
    f = [cosine_factor(s, steps) for s in range(steps + 1)]
    assert f[0] < f[4] <= f[5] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(f[5:], f[6:]))
    assert f[steps] == pytest.approx(0.1) and f[50] == pytest.approx(0.1 + 0.45 * (1 + math.cos(math.pi * 45 / 95)))
