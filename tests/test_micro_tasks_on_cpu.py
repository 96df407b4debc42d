"""Tests for the micro profile's procedural word problems (``corl_bench.micro.tasks``) and the families' flawed
warm-start solutions (``corl_bench.micro.families.flawed_solution``). Pure Python, no torch.

``tasks.test_suite`` is always called through the module: importing a function named ``test_*`` into this file
would make pytest collect it as a test.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import re

import pytest

from corl_bench.micro import tasks
from corl_bench.micro.families import BUILTIN_FAMILIES, Family, flawed_solution
from corl_bench.micro.tasks import Problem, Step, format_solution, problem_stream

N_STREAM = 5000
SOLUTION_RE = re.compile(r"^\d+(?:[+-]\d=\d+;)+\\boxed\{(\d+)\}$")
FLAW_OF = {"qwen2-bpe": "no-carry", "llama-bpe": "skip-last", "neox-bpe": "no-borrow"}


def _stream(seed: int, n: int = N_STREAM) -> list[Problem]:
    return list(itertools.islice(problem_stream(seed), n))


def _problem(start: int, *steps: tuple[str, int], pid: str = "hand-0") -> Problem:
    """A hand-built problem with its tags computed as the generator computes them."""
    st = tuple(Step(op, d, 0) for op, d in steps)
    return Problem(pid, start, st, "Uma", "apples", tasks._tags(start, st))


def _always_flawed(family_name: str) -> Family:
    return dataclasses.replace(BUILTIN_FAMILIES[family_name], p_sys=1.0, p_noise=0.0)


def _never_flawed(family_name: str) -> Family:
    return dataclasses.replace(BUILTIN_FAMILIES[family_name], p_sys=0.0, p_noise=0.0)


def _expected_tags(p: Problem) -> set[str]:
    tags, v = set(), p.start
    for s in p.steps:
        if s.op == "+" and v % 10 + s.operand > 9:
            tags.add("carry")
        if s.op == "-" and v % 10 < s.operand:
            tags.add("borrow")
        v = v + s.operand if s.op == "+" else v - s.operand
    if len(p.steps) == 3:
        tags.add("three-step")
    return tags


# ----------------------------------------------------------------------------------------------- test suites
def test_micro_test_suite_has_300_problems_and_micro_dev_200() -> None:
    assert len(tasks.test_suite("micro-test")) == 300
    assert len(tasks.test_suite("micro-dev")) == 200
    assert tasks.SUITES["micro-test"][1] == 300


def test_suite_is_deterministic_across_calls_and_cache_clears() -> None:
    def snapshot() -> list[tuple]:
        return [(p.id, p.chain(), p.text("original"), p.text("rephrased"), p.answer, p.tags)
                for p in tasks.test_suite("micro-test")]

    first = snapshot()
    assert snapshot() == first
    tasks.test_suite.cache_clear()
    assert snapshot() == first
    tasks.test_suite.cache_clear()
    again = tasks.test_suite("micro-test")
    assert [p.id for p in again] == [row[0] for row in first]
    assert again == tasks.test_suite("micro-test")


def test_suite_ids_are_unique_and_named_after_the_suite() -> None:
    for name in ("micro-test", "micro-dev"):
        ids = [p.id for p in tasks.test_suite(name)]
        assert len(set(ids)) == len(ids)
        assert ids[0] == f"{name}-0000"
        assert all(i.startswith(f"{name}-") for i in ids)


def test_suite_arithmetic_chains_are_unique() -> None:
    for name in ("micro-test", "micro-dev"):
        chains = [p.chain() for p in tasks.test_suite(name)]
        assert len(set(chains)) == len(chains), name


def test_micro_test_and_micro_dev_are_disjoint_by_chain() -> None:
    test_chains = {p.chain() for p in tasks.test_suite("micro-test")}
    dev_chains = {p.chain() for p in tasks.test_suite("micro-dev")}
    assert not test_chains & dev_chains
    assert tasks.held_out_chains() == frozenset(test_chains | dev_chains)


def test_unknown_suite_is_rejected_listing_valid_suites() -> None:
    with pytest.raises(KeyError, match="micro-test"):
        tasks.test_suite("micro-nope")


def test_suite_covers_every_difficulty_level_and_tag() -> None:
    suite = tasks.test_suite("micro-test")
    assert {p.level for p in suite} == {1, 2, 3}
    assert {len(p.steps) for p in suite} == {2, 3}
    tags = set(itertools.chain.from_iterable(p.tags for p in suite))
    assert tags == {"carry", "borrow", "three-step"}


# ----------------------------------------------------------------------------------------------- training stream
def test_problem_stream_is_deterministic_per_seed() -> None:
    a = [(p.id, p.chain(), p.name, p.item, p.text()) for p in _stream(3, 500)]
    b = [(p.id, p.chain(), p.name, p.item, p.text()) for p in _stream(3, 500)]
    assert a == b


def test_problem_stream_differs_across_seeds() -> None:
    a = [p.chain() for p in _stream(0, 200)]
    b = [p.chain() for p in _stream(1, 200)]
    assert a != b
    assert sum(x == y for x, y in zip(a, b)) < 20
    assert {p.id for p in _stream(0, 50)}.isdisjoint({p.id for p in _stream(1, 50)})


def test_problem_stream_ids_are_unique_and_use_the_prefix() -> None:
    ids = [p.id for p in itertools.islice(problem_stream(5, prefix="warm"), 1000)]
    assert len(set(ids)) == len(ids)
    assert all(i.startswith("warm-5-") for i in ids)


@pytest.mark.parametrize("seed", [0, 1, 12345])
def test_problem_stream_never_yields_a_held_out_chain(seed: int) -> None:
    held = {p.chain() for name in tasks.SUITES for p in tasks.test_suite(name)}
    stream = _stream(seed)
    assert len(stream) == N_STREAM
    leaked = [p.id for p in stream if p.chain() in held]
    assert not leaked, f"{len(leaked)} held-out chains leaked, e.g. {leaked[:3]}"


def test_problem_stream_does_skip_held_out_chains() -> None:
    # The raw generator does produce held-out chains at this rate, so the filter above is really exercised.
    held = tasks.held_out_chains()
    rng = random.Random(0)
    raw = [tasks.random_problem(rng, f"raw-{i}").chain() for i in range(N_STREAM)]
    assert any(c in held for c in raw)


# ----------------------------------------------------------------------------------------------- arithmetic
def _all_problems() -> list[Problem]:
    return list(tasks.test_suite("micro-test")) + list(tasks.test_suite("micro-dev")) + _stream(7, 2000)


def test_every_intermediate_value_is_in_0_to_99_and_operands_in_2_to_9() -> None:
    for p in _all_problems():
        assert 10 <= p.start <= 89, p
        assert len(p.steps) in (2, 3), p
        for s in p.steps:
            assert s.op in ("+", "-"), p
            assert 2 <= s.operand <= 9, p
            assert 0 <= s.verb < 4, p
        assert all(0 <= v <= 99 for v in p.values()), p
        assert p.answer == str(p.values()[-1])


def test_chain_is_start_then_signed_operands() -> None:
    p = _problem(40, ("+", 9), ("-", 3))
    assert p.chain() == (40, 9, -3)
    assert p.values() == [40, 49, 46]
    assert p.answer == "46"


# ----------------------------------------------------------------------------------------------- views
def _numbers(text: str) -> list[int]:
    return sorted(int(n) for n in re.findall(r"\d+", text))


def test_original_and_rephrased_views_differ_but_share_the_problem() -> None:
    for p in list(tasks.test_suite("micro-test")) + _stream(2, 300):
        original, rephrased = p.text("original"), p.text("rephrased")
        assert original != rephrased
        assert p.text() == original
        # both state exactly the start value and every operand, and nothing else numeric
        expected = sorted([p.start] + [s.operand for s in p.steps])
        assert _numbers(original) == expected, original
        assert _numbers(rephrased) == expected, rephrased
        for text in (original, rephrased):
            assert p.name in text and p.item in text
            assert text.endswith(f"How many {p.item} now?")


def test_views_of_a_hand_built_problem() -> None:
    p = Problem("x", 40, (Step("+", 9, 0), Step("-", 3, 1)), "Uma", "apples")
    assert p.text("original") == "Uma has 40 apples. Uma finds 9 and sells 3. How many apples now?"
    assert p.text("rephrased") == "Uma sold 3 apples after finding 9. At first there were 40. How many apples now?"
    # both views describe the same problem, so they share one answer and one id
    assert p.answer == "46"


def test_unknown_view_is_rejected() -> None:
    with pytest.raises(ValueError, match="rephrased"):
        _problem(40, ("+", 9), ("-", 3)).text("sideways")


# ----------------------------------------------------------------------------------------------- solutions
def test_solution_format_of_a_hand_built_problem() -> None:
    assert _problem(40, ("+", 9), ("-", 3)).solution() == "40+9=49;-3=46;\\boxed{46}"
    assert _problem(18, ("+", 8), ("+", 6), ("+", 6)).solution() == "18+8=26;+6=32;+6=38;\\boxed{38}"


def test_solution_boxes_the_answer_for_every_problem() -> None:
    for p in _all_problems():
        sol = p.solution()
        m = SOLUTION_RE.match(sol)
        assert m, sol
        assert m.group(1) == p.answer
        assert sol.startswith(str(p.start))
        # every step's written result is the true running value
        written = [int(x) for x in re.findall(r"=(\d+);", sol)]
        assert written == p.values()[1:]


def test_format_solution_values_override_the_results() -> None:
    assert format_solution(68, [("+", 4)], [68, 62]) == "68+4=62;\\boxed{62}"


# ----------------------------------------------------------------------------------------------- tags and levels
def test_carry_step_is_tagged_carry() -> None:
    p = _problem(68, ("+", 4), ("-", 2))
    assert "carry" in p.tags and "borrow" not in p.tags
    assert p.level == 2


def test_borrow_step_is_tagged_borrow() -> None:
    p = _problem(52, ("-", 7), ("+", 3))
    assert "borrow" in p.tags and "carry" not in p.tags
    assert p.level == 2


def test_carry_exactly_to_ten_is_a_carry() -> None:
    assert "carry" in _problem(46, ("+", 4), ("+", 2)).tags  # 6 + 4 = 10


def test_problem_without_carry_or_borrow_is_level_1() -> None:
    p = _problem(41, ("+", 5), ("-", 3))
    assert p.tags == ()
    assert p.level == 1


def test_three_steps_is_level_3_and_tagged_three_step() -> None:
    p = _problem(41, ("+", 5), ("-", 3), ("+", 2))
    assert p.tags == ("three-step",)
    assert p.level == 3
    q = _problem(68, ("+", 4), ("-", 7), ("+", 2))
    assert set(q.tags) == {"carry", "borrow", "three-step"}
    assert q.level == 3


def test_handbuilt_problem_without_tags_has_level_from_step_count() -> None:
    assert Problem("x", 41, (Step("+", 5, 0), Step("-", 3, 0), Step("+", 2, 0)), "Uma", "apples").level == 3
    assert Problem("x", 41, (Step("+", 5, 0), Step("-", 3, 0)), "Uma", "apples").level == 1


def test_generated_tags_and_levels_match_the_arithmetic() -> None:
    for p in _all_problems():
        assert set(p.tags) == _expected_tags(p), p
        assert list(p.tags) == sorted(p.tags)
        assert (p.level == 3) == (len(p.steps) == 3), p
        if len(p.steps) == 2:
            assert p.level == (2 if {"carry", "borrow"} & set(p.tags) else 1), p


# ----------------------------------------------------------------------------------------------- flawed solutions
def test_builtin_families_have_their_documented_flaws() -> None:
    assert {name: fam.flaw for name, fam in BUILTIN_FAMILIES.items()} == FLAW_OF


def test_no_carry_flaw_drops_the_carry() -> None:
    p = _problem(68, ("+", 4), ("-", 2))
    sol = flawed_solution(_always_flawed("qwen2-bpe"), p, random.Random(0))
    assert sol == "68+4=62;-2=60;\\boxed{60}"
    assert p.solution() == "68+4=72;-2=70;\\boxed{70}"


def test_no_carry_flaw_leaves_a_problem_without_carry_correct() -> None:
    p = _problem(41, ("+", 5), ("-", 7))
    assert flawed_solution(_always_flawed("qwen2-bpe"), p, random.Random(0)) == p.solution()


def test_skip_last_flaw_drops_the_third_step_and_boxes_the_intermediate_value() -> None:
    p = _problem(40, ("+", 9), ("-", 3), ("+", 5))
    sol = flawed_solution(_always_flawed("llama-bpe"), p, random.Random(0))
    assert sol == "40+9=49;-3=46;\\boxed{46}"
    assert p.answer == "51"


def test_skip_last_flaw_leaves_two_step_problems_correct() -> None:
    p = _problem(40, ("+", 9), ("-", 3))
    assert flawed_solution(_always_flawed("llama-bpe"), p, random.Random(0)) == p.solution()


def test_no_borrow_flaw_forgets_the_borrow() -> None:
    p = _problem(52, ("-", 7), ("+", 3))
    sol = flawed_solution(_always_flawed("neox-bpe"), p, random.Random(0))
    assert sol == "52-7=55;+3=58;\\boxed{58}"
    assert p.solution() == "52-7=45;+3=48;\\boxed{48}"


def test_no_borrow_flaw_leaves_a_problem_without_borrow_correct() -> None:
    p = _problem(58, ("-", 7), ("+", 9))
    assert flawed_solution(_always_flawed("neox-bpe"), p, random.Random(0)) == p.solution()


def test_flaw_error_propagates_to_later_steps() -> None:
    # the rest of the working continues from the wrong value
    p = _problem(68, ("+", 4), ("+", 8), ("-", 3))
    assert flawed_solution(_always_flawed("qwen2-bpe"), p, random.Random(0)) == "68+4=62;+8=60;-3=57;\\boxed{57}"


@pytest.mark.parametrize("family", sorted(BUILTIN_FAMILIES))
def test_without_flaw_or_noise_the_flawed_solution_is_the_correct_one(family: str) -> None:
    fam = _never_flawed(family)
    rng = random.Random(123)
    for p in list(tasks.test_suite("micro-test"))[:200] + [_problem(68, ("+", 4), ("-", 2)),
                                                           _problem(52, ("-", 7), ("+", 3)),
                                                           _problem(40, ("+", 9), ("-", 3), ("+", 5))]:
        assert flawed_solution(fam, p, rng) == p.solution(), p


@pytest.mark.parametrize("family", sorted(BUILTIN_FAMILIES))
def test_always_flawed_solution_differs_exactly_on_the_flaw_pocket(family: str) -> None:
    fam = _always_flawed(family)
    rng = random.Random(7)
    pocket_tag = {"no-carry": "carry", "skip-last": "three-step", "no-borrow": "borrow"}[fam.flaw]
    for p in tasks.test_suite("micro-test"):
        sol = flawed_solution(fam, p, rng)
        assert SOLUTION_RE.match(sol), sol
        assert (sol != p.solution()) == (pocket_tag in p.tags), (p, sol)


def test_flawed_solution_is_deterministic_given_the_rng() -> None:
    fam = BUILTIN_FAMILIES["qwen2-bpe"]
    suite = tasks.test_suite("micro-test")[:100]
    a = [flawed_solution(fam, p, random.Random(5)) for p in suite]
    b = [flawed_solution(fam, p, random.Random(5)) for p in suite]
    assert a == b


def test_noise_changes_one_step_by_at_most_nine() -> None:
    fam = dataclasses.replace(BUILTIN_FAMILIES["qwen2-bpe"], p_sys=0.0, p_noise=1.0)
    p = _problem(41, ("+", 5), ("-", 3))  # 41+5=46;-3=43
    rng = random.Random(0)
    for _ in range(50):
        sol = flawed_solution(fam, p, rng)
        assert sol != p.solution()
        assert SOLUTION_RE.match(sol), sol
        boxed = int(SOLUTION_RE.match(sol).group(1))
        assert 1 <= abs(boxed - 43) <= 9
