"""The Qwen evaluation grader's percent rule: a prediction equals gold, gold/100 or gold x 100 (not integer x integer).

Evaluation grading (``verifier.grade``, the ``math`` grader of benchmark specs, maj@k) applies it; training rewards
(``is_equivalent``) do not, like the reference code's reward grader.
"""

from __future__ import annotations

import pytest

from corl_bench.eval.metrics import maj_at_k
from corl_bench.eval.scoring import grade_text
from corl_bench.grading.verifier import grade, is_correct, is_equivalent, percent_equivalent

# (completion, gold, correct under evaluation grading, reason)
CASES: list[tuple[str, str, bool, str]] = [
    ("So \\boxed{5\\%}.", "0.05", True, "percent prediction, decimal gold"),
    ("So \\boxed{5%}.", "0.05", True, "percent sign without backslash"),
    ("So \\boxed{5}.", "0.05", True, "bare number, decimal gold (Qwen compares gold x 100)"),
    ("So \\boxed{0.05}.", "5\\%", True, "decimal prediction, percent gold"),
    ("So \\boxed{0.05}.", "5%", True, "decimal prediction, percent gold without backslash"),
    ("So \\boxed{0.05}.", "5", True, "decimal prediction, integer gold (gold / 100)"),
    ("So \\boxed{12.5\\%}.", "\\frac{1}{8}", True, "percent prediction, fraction gold"),
    ("So \\boxed{25\\%}.", "1/4", True, "percent prediction, slash fraction gold"),
    ("So \\boxed{\\frac{1}{4}}.", "25\\%", True, "fraction prediction, percent gold"),
    ("So \\boxed{37.5\\%}.", "0.375", True, "decimal percent"),
    ("So \\boxed{5\\%}.", "5", True, "same number, percent stripped"),
    ("So \\boxed{5\\%}.", "0.5", False, "off by a factor of 10"),
    ("So \\boxed{50\\%}.", "0.05", False, "off by a factor of 10 the other way"),
    ("So \\boxed{5\\%}.", "0.0005", False, "only one factor of 100 is allowed"),
    ("So \\boxed{0.5}.", "5", False, "decimal off by 10"),
    ("So \\boxed{500}.", "5", False, "integer x integer: the rule is not applied (Qwen would accept)"),
    ("So \\boxed{5}.", "500", False, "integer x integer the other way"),
    ("So \\boxed{5\\%}.", "-0.05", False, "sign matters"),
    ("So \\boxed{x}.", "0.05", False, "not a number"),
    ("no answer here", "0.05", False, "no answer"),
]


@pytest.mark.parametrize("completion,gold,expected,reason", CASES, ids=[c[3] for c in CASES])
def test_percent_rule_table(completion: str, gold: str, expected: bool, reason: str) -> None:
    assert grade(completion, gold)[1] is expected, reason
    assert grade_text(completion, gold, "boxed", "math")[1] is expected, reason
    assert grade_text(completion, gold, "qwen", "math")[1] is expected, reason


def test_training_equivalence_has_no_percent_rule() -> None:
    assert not is_equivalent("5", "0.05") and is_correct("5", "0.05")
    assert percent_equivalent("0.05", "5") and not percent_equivalent("5", "5")  # equal is is_equivalent's job


def test_maj_at_k_grades_the_vote_with_the_percent_rule() -> None:
    assert maj_at_k(["5", "5", "7"], "0.05")
    assert not maj_at_k(["7", "7", "5"], "0.05")


def test_integer_answers_grade_as_before() -> None:
    for pred in range(0, 200):
        for gold in (0, 1, 2, 5, 10, 50, 100, 150, 199):
            assert is_correct(str(pred), str(gold)) is (pred == gold)
