"""CPU tests for corl_bench.eval.metrics against hand-computed values."""

from __future__ import annotations

import math
from typing import Any, Optional

import pytest

from corl_bench.eval.metrics import (
    METRICS,
    BenchmarkScores,
    avg_at_k,
    bootstrap_ci,
    maj_at_k,
    pass_at_k,
    score_predictions,
)


# ------------------------------------------------------------------------------------------- pass@k


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (4, 1, 1, 0.25),
        (4, 1, 2, 0.5),  # 1 - C(3,2)/C(4,2) = 1 - 3/6
        (5, 2, 3, 0.9),  # 1 - C(3,3)/C(5,3) = 1 - 1/10
        (4, 1, 4, 1.0),  # every 4-subset holds the correct sample (verl PR#7240 bug gave 0.684)
        (4, 0, 2, 0.0),
        (10, 0, 10, 0.0),
        (4, 4, 1, 1.0),
        (8, 8, 8, 1.0),
        (10, 3, 1, 0.3),  # pass@1 is c/n
        (10, 3, 2, 1 - 21 / 45),  # 1 - C(7,2)/C(10,2)
        (6, 2, 3, 1 - 4 / 20),  # 1 - C(4,3)/C(6,3)
    ],
)
def test_pass_at_k_hand_values(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_matches_binomial_form_and_is_stable() -> None:
    for n in range(1, 12):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = 1 - math.comb(n - c, k) / math.comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12), (n, c, k)
    # Large n: the binomials overflow floats, the product form does not.
    value = pass_at_k(2000, 1, 1000)
    assert value == pytest.approx(0.5, abs=1e-9)
    assert 0.0 <= pass_at_k(5000, 7, 50) <= 1.0


@pytest.mark.parametrize(("n", "c", "k"), [(4, 1, 5), (4, 1, 0), (4, 5, 1), (4, -1, 1), (0, 0, 1)])
def test_pass_at_k_rejects_bad_arguments(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


# ----------------------------------------------------------------------------------- avg@k / maj@k


def test_avg_at_k() -> None:
    assert avg_at_k([True, False, False, True]) == 0.5
    assert avg_at_k([False] * 3) == 0.0
    assert avg_at_k([True]) == 1.0
    with pytest.raises(ValueError):
        avg_at_k([])


@pytest.mark.parametrize(
    ("answers", "gold", "expected", "reason"),
    [
        (["3", "4", "4"], "4", True, "clear plurality"),
        (["3", "4", "4"], "3", False, "minority answer is not the vote"),
        (["3", "4", "4", "3"], "3", True, "tie goes to the first seen"),
        (["3", "4", "4", "3"], "4", False, "tie does not go to the later answer"),
        ([None, None, "5"], "5", True, "None never votes, even when it is the most common"),
        ([None, None, None], "5", False, "no valid answer"),
        ([], "5", False, "no answers at all"),
        (["\\frac{1}{2}", "\\frac{1}{2}", "7"], "0.5", True, "winner graded with is_equivalent"),
        (["2.50", "2.50", "3"], "2.5", True, "numeric equivalence"),
    ],
)
def test_maj_at_k(answers: list[Optional[str]], gold: str, expected: bool, reason: str) -> None:
    assert maj_at_k(answers, gold) is expected, reason


# -------------------------------------------------------------------------------------- bootstrap


def test_bootstrap_ci_brackets_mean_and_is_deterministic() -> None:
    values = [1.0, 0.0, 1.0, 1.0, 0.0, 0.5, 1.0, 0.0, 0.25, 1.0] * 3
    mean = sum(values) / len(values)
    lo, hi = bootstrap_ci(values, n_boot=500, seed=3)
    assert lo < mean < hi
    assert 0.0 <= lo and hi <= 1.0
    assert bootstrap_ci(values, n_boot=500, seed=3) == (lo, hi)
    assert bootstrap_ci(values, n_boot=500, seed=4) != (lo, hi)
    lo90, hi90 = bootstrap_ci(values, n_boot=500, alpha=0.10, seed=3)
    assert lo <= lo90 <= hi90 <= hi  # a narrower level gives a narrower interval on the same draws


def test_bootstrap_ci_degenerate_and_bad_input() -> None:
    assert bootstrap_ci([0.7] * 5) == pytest.approx((0.7, 0.7))
    with pytest.raises(ValueError):
        bootstrap_ci([])
    with pytest.raises(ValueError):
        bootstrap_ci([1.0], alpha=1.5)
    with pytest.raises(ValueError):
        bootstrap_ci([1.0], n_boot=0)


# ----------------------------------------------------------------------------- score_predictions


def row(pid: str, decoding: str, completion: str, gold: str, *, index: int = 0,
        finished: bool = True, correct: bool | None = None) -> dict[str, Any]:
    """A predictions row; the stored ``correct``/``extracted`` are deliberately unreliable."""
    return {
        "benchmark": "micro-test", "benchmark_version": "1", "problem_id": pid, "decoding": decoding,
        "sample_index": index, "prompt": "p", "completion": completion, "extracted": "junk",
        "gold": gold, "correct": True if correct is None else correct, "finished": finished,
        "n_tokens": 5,
    }


def test_score_predictions_recomputes_correctness() -> None:
    rows = [
        # p1: greedy right; samples 12, 12, 13, none -> avg 2/4, maj 12 (right), pass@4 1
        row("p1", "greedy", "9+3=12;\\boxed{12}", "12"),
        row("p1", "sampled", "\\boxed{12}", "12", index=0),
        row("p1", "sampled", "so the answer is 12", "12", index=1),
        row("p1", "sampled", "\\boxed{13}", "12", index=2, correct=True),  # stored lie
        row("p1", "sampled", "no idea", "12", index=3, finished=False),
        # p2: greedy wrong despite stored correct=True; samples 5, 6, 6, 6 -> avg 1/4, maj 6 (wrong)
        row("p2", "greedy", "\\boxed{4}", "5", correct=True),
        row("p2", "sampled", "\\boxed{5}", "5", index=0),
        row("p2", "sampled", "\\boxed{6}", "5", index=1),
        row("p2", "sampled", "\\boxed{6}", "5", index=2, finished=False),
        row("p2", "sampled", "\\boxed{6}", "5", index=3),
    ]
    scores = score_predictions(rows)
    assert isinstance(scores, BenchmarkScores)
    assert scores.n_problems == 2
    assert scores.k == 4
    assert scores.greedy == pytest.approx(0.5)
    assert scores.avg_k == pytest.approx((2 / 4 + 1 / 4) / 2)
    assert scores.maj_k == pytest.approx(0.5)
    assert scores.pass_k == pytest.approx(1.0)
    assert scores.extraction_failure == pytest.approx(1 / 10)
    assert scores.clipped == pytest.approx(2 / 10)
    assert set(scores.metrics()) == set(METRICS)
    assert scores.metrics()["avg_k"] == scores.avg_k


def test_stored_correct_true_but_wrong_counts_as_wrong() -> None:
    rows = [row("p", "greedy", "\\boxed{7}", "8", correct=True),
            row("p", "sampled", "\\boxed{7}", "8", correct=True)]
    scores = score_predictions(rows)
    assert scores.greedy == 0.0 and scores.avg_k == 0.0 and scores.maj_k == 0.0 and scores.pass_k == 0.0


def test_score_predictions_greedy_only_sampled_only_and_empty() -> None:
    greedy_only = score_predictions([row("a", "greedy", "\\boxed{1}", "1"),
                                     row("b", "greedy", "\\boxed{3}", "2")])
    assert greedy_only.greedy == 0.5
    assert greedy_only.avg_k is None and greedy_only.maj_k is None and greedy_only.pass_k is None
    assert greedy_only.k == 0

    sampled_only = score_predictions([row("a", "sampled", "\\boxed{1}", "1")])
    assert sampled_only.greedy is None and sampled_only.avg_k == 1.0 and sampled_only.k == 1

    empty = score_predictions([])
    assert empty.n_problems == 0 and empty.greedy is None and empty.avg_k is None
    assert empty.extraction_failure == 0.0 and empty.clipped == 0.0 and empty.k == 0


def test_score_predictions_uneven_k_uses_each_problems_n() -> None:
    rows = [row("a", "sampled", "\\boxed{0}", "1", index=i) for i in range(3)]
    rows.append(row("a", "sampled", "\\boxed{1}", "1", index=3))  # a: n=4, c=1
    rows += [row("b", "sampled", "\\boxed{0}", "1", index=i) for i in range(2)]  # b: n=2, c=0
    scores = score_predictions(rows)
    assert scores.k == 2
    assert scores.pass_k == pytest.approx((1.0 + 0.0) / 2)  # pass@4 of a, pass@2 of b
    assert scores.avg_k == pytest.approx((0.25 + 0.0) / 2)


def test_score_predictions_rejects_malformed_rows() -> None:
    with pytest.raises(ValueError, match="missing"):
        score_predictions([{"problem_id": "a", "decoding": "greedy", "gold": "1"}])
    with pytest.raises(ValueError, match="decoding"):
        score_predictions([row("a", "beam", "\\boxed{1}", "1")])
